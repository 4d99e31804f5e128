#!/bin/sh
IFS= read -r line || exit 3
t=${line#*\"text\":\"}; t=${t%%\"*}
ctx=${line#*\"contextId\":\"}; ctx=${ctx%%\"*}
export CHAOS_CTX="$ctx"
read -r st < /proc/$$/stat
set -- $st
echo "$$ ${22}" > "$CHAOS_PIDS/$ctx"
cmd=${t%% *}; arg=${t#"$cmd"}; arg=${arg# }
say() { printf '%s\n' "$1"; }
finish() { say "{\"status\":\"completed\",\"text\":\"$1\"}"; exit 0; }
ticks() {
  set -- $arg; i=0
  while [ $i -lt $2 ]; do
    say "{\"status\":\"working\",\"text\":\"tick $i\"}"
    sleep "$1"; rc=$?
    [ $rc -eq 0 ] || { say "{\"status\":\"failed\",\"text\":\"child ended $rc\"}"; exit 0; }
    i=$((i+1))
  done
}
grow() {
  s=zzzzzzzzzzzzzzzz; i=0
  while [ $i -lt 16 ]; do s="$s$s"; i=$((i+1)); done
  i=0
  while [ $i -lt $1 ]; do [ "$2" = slow ] && sleep 0.6; s="$s$s"; i=$((i+1)); done
}
case "$cmd" in
ok) say '{"artifact":{"artifactId":"out","parts":[{"text":"ok"}]},"lastChunk":true}'; finish ok ;;
fail) say '{"status":"failed","text":"failing on purpose"}' ;;
reject) say '{"status":"rejected","text":"not mine"}' ;;
sleep) ticks; finish slept ;;
child) setsid sleep 300 </dev/null >/dev/null 2>&1 & ticks; finish "slept beside a child" ;;
flood) i=0; app=false
  while [ $i -lt "$arg" ]; do
    say "{\"artifact\":{\"artifactId\":\"flood\",\"parts\":[{\"text\":\"line $i of $arg\\n\"}]},\"append\":$app}"
    app=true; i=$((i+1))
  done
  say '{"artifact":{"artifactId":"flood","parts":[{"text":"end"}]},"append":true,"lastChunk":true}'
  finish "flooded $arg" ;;
ask) k=1; answers=
  while [ $k -le "$arg" ]; do
    say "{\"status\":\"input-required\",\"text\":\"question $k\"}"
    IFS= read -r next || exit 4
    a=${next#*\"text\":\"}; a=${a%%\"*}; answers="$answers $a"; k=$((k+1))
  done
  finish "answers:$answers" ;;
askidle) say '{"status":"input-required","text":"anyone there?"}'; IFS= read -r next; finish late ;;
hang) say '{"status":"working","text":"hanging"}'; sleep 1000 ;;
big) finish "big ${#arg}" ;;
grow) grow 4 slow; finish grew ;;
hog) grow 8 fast; finish "grew past any limit" ;;
*) say "{\"status\":\"failed\",\"text\":\"unknown command $cmd\"}" ;;
esac
