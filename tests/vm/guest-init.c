/*
 * Stand-in guest /init for the VM tests (see README.md): mounts proc, sysfs
 * and devtmpfs, loads the kernel modules listed in /lib/modules/modules.load,
 * then listens on vsock port `vsockport=N` (kernel command line) on
 * VMADDR_CID_ANY and answers every connection with one line,
 * "hello from guest <uname -r>\n", then closes it.
 * On any failure it says why on the console and powers the VM off.
 *
 * Build: gcc -static -O2 -Wall -o guest-init guest-init.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE 4 /* linux/module.h, kernel >= 6.4 */
#endif

#define MODDIR "/lib/modules"

static void say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n = snprintf(buf, sizeof buf, "guest-init: ");
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	(void)!write(2, buf, n);
}

static __attribute__((noreturn)) void die(const char *fmt, ...)
{
	char buf[400];
	va_list ap;
	int err = errno;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	say("FATAL: %s: %s; powering off", buf, strerror(err));
	sync();
	reboot(RB_POWER_OFF);
	/* Only reached if reboot() failed: exiting PID 1 panics the kernel,
	 * which with panic=-1 and qemu -no-reboot also ends the VM. */
	_exit(1);
}

/* Reopen fds 0-2 on /dev/console (the kernel gives /init none when the
 * initramfs lacks /dev/console, and devtmpfs is not auto-mounted there). */
static void console(void)
{
	int fd = open("/dev/console", O_RDWR | O_NOCTTY);
	if (fd < 0)
		return;
	for (int i = 0; i < 3; i++)
		if (fd != i)
			dup2(fd, i);
	if (fd > 2)
		close(fd);
}

static void mountfs(const char *type, const char *dir, unsigned long flags)
{
	mkdir(dir, 0755);
	if (mount(type, dir, type, flags, NULL) < 0 && errno != EBUSY)
		die("mount %s on %s", type, dir);
}

static void load_modules(void)
{
	char line[256], path[300];
	FILE *f = fopen(MODDIR "/modules.load", "re");
	if (!f) {
		if (errno == ENOENT) {
			say("no " MODDIR "/modules.load: loading no modules");
			return;
		}
		die("open " MODDIR "/modules.load");
	}
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		snprintf(path, sizeof path, MODDIR "/%s", line);
		size_t n = strlen(path);
		int flags = 0;
		if ((n > 3 && !strcmp(path + n - 3, ".xz")) || (n > 4 && !strcmp(path + n - 4, ".zst")) ||
		    (n > 3 && !strcmp(path + n - 3, ".gz")))
			flags = MODULE_INIT_COMPRESSED_FILE;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open module %s", path);
		if (syscall(SYS_finit_module, fd, "", flags) < 0 && errno != EEXIST)
			die("finit_module %s (flags %d)", path, flags);
		close(fd);
	}
	fclose(f);
}

/* vsockport=N from /proc/cmdline. */
static unsigned parse_port(void)
{
	char cmd[4096];
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open /proc/cmdline");
	ssize_t n = read(fd, cmd, sizeof cmd - 1);
	if (n < 0)
		die("read /proc/cmdline");
	close(fd);
	cmd[n] = 0;
	for (char *tok = strtok(cmd, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
		if (strncmp(tok, "vsockport=", 10))
			continue;
		char *end;
		errno = 0;
		unsigned long p = strtoul(tok + 10, &end, 10);
		if (errno || *end || end == tok + 10 || p >= 0xffffffffUL) {
			errno = EINVAL;
			die("bad %s on the kernel command line", tok);
		}
		return (unsigned)p;
	}
	errno = EINVAL;
	die("no vsockport=N on the kernel command line");
}

static double uptime(void)
{
	char buf[64] = "0";
	int fd = open("/proc/uptime", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	return atof(buf);
}

int main(void)
{
	mountfs("devtmpfs", "/dev", MS_NOSUID);
	console();
	mountfs("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
	mountfs("sysfs", "/sys", MS_NOSUID | MS_NODEV | MS_NOEXEC);
	load_modules();

	unsigned port = parse_port();
	struct utsname u;
	if (uname(&u) < 0)
		die("uname");

	int s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		die("socket(AF_VSOCK) (vsock modules not loaded?)");
	struct sockaddr_vm a = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = port};
	if (bind(s, (struct sockaddr *)&a, sizeof a) < 0)
		die("bind vsock port %u", port);
	if (listen(s, 16) < 0)
		die("listen vsock port %u", port);

	unsigned cid = VMADDR_CID_ANY;
	int vfd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
	if (vfd >= 0) {
		ioctl(vfd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid);
		close(vfd);
	}
	say("listening on vsock cid %u port %u (kernel %s, uptime %.2f s)", cid, port, u.release, uptime());

	char msg[256];
	int mlen = snprintf(msg, sizeof msg, "hello from guest %s\n", u.release);
	for (;;) {
		struct sockaddr_vm peer;
		socklen_t plen = sizeof peer;
		int c = accept4(s, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		say("connection from cid %u port %u", peer.svm_cid, peer.svm_port);
		if (write(c, msg, mlen) != mlen)
			say("write to cid %u: %s", peer.svm_cid, strerror(errno));
		close(c);
	}
}
