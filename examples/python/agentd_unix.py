"""Talk to agentd from the official A2A Python SDK (``a2a-sdk`` 1.x).

agentd serves the A2A JSON-RPC binding as HTTP/1.1 on a unix socket and
labels that interface with its own binding URI,
``https://agentd.dev/a2a/binding/jsonrpc-unix``, whose card URL is
``unix:///path/to/agentd.sock``. A stock SDK client does not know that
binding, so it (rightly) refuses the interface. This module teaches it:

* ``unix_http_client(path)`` -- an ``httpx.AsyncClient`` whose connections go
  to the socket (``httpx.AsyncHTTPTransport(uds=path)``) under the dummy base
  URL ``http://agentd`` (the Host header means nothing on a socket).
* ``fetch_card(path)`` -- the SDK's own ``A2ACardResolver`` over that client.
* ``client_factory(path)`` -- a ``ClientFactory`` that supports our binding
  URI: ``register()`` maps it to the SDK's ``JsonRpcTransport`` on a socket
  client. The factory's own card-based interface selection then picks the
  unix interface from the card.
* ``connect(path)`` -- both in one call: a ready ``a2a.client.Client``.

The dial always goes to the socket path the caller names, never to a URL the
card carries (the card's ``unix:///`` URL is only how the interface is
labelled; behind a bind mount it may name another path).

    import asyncio
    from agentd_unix import connect
    from a2a.helpers import new_text_message
    from a2a.types import Role, SendMessageRequest

    async def main():
        async with await connect('/tmp/agentd.sock', streaming=False) as client:
            message = new_text_message('hello', role=Role.ROLE_USER)
            async for event in client.send_message(SendMessageRequest(message=message)):
                print(event.task.status.state, event.task.artifacts)

    asyncio.run(main())
"""

from __future__ import annotations

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.types.a2a_pb2 import AgentCard

#: The protocolBinding agentd puts on a unix-socket interface.
BINDING_UNIX = 'https://agentd.dev/a2a/binding/jsonrpc-unix'
#: Any base URL will do: the socket is the destination, Host is ignored.
BASE_URL = 'http://agentd'
#: The A2A protocol version this shim speaks (sent on every request).
A2A_VERSION = '1.0'


def unix_http_client(socket_path: str, timeout: float = 60.0) -> httpx.AsyncClient:
    """An httpx client that sends every request to the unix socket.

    Streaming reads wait up to ``timeout`` seconds per read; agentd sends a
    keep-alive comment every 15 s, so anything above that is safe.
    """
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=socket_path),
        base_url=BASE_URL,
        headers={'A2A-Version': A2A_VERSION},
        timeout=timeout,
    )


async def fetch_card(socket_path: str) -> AgentCard:
    """GET /.well-known/agent-card.json on the socket, with the SDK's resolver."""
    async with unix_http_client(socket_path) as http:
        return await A2ACardResolver(http, BASE_URL).get_agent_card()


def client_factory(socket_path: str, config: ClientConfig | None = None) -> ClientFactory:
    """A ClientFactory that selects agentd's unix interface from a card.

    ``config.supported_protocol_bindings`` is set to our binding URI (plus
    whatever bindings the caller already listed), so the factory's selection
    walks the card's interfaces in order and takes the unix one.
    """
    config = config or ClientConfig()
    if BINDING_UNIX not in config.supported_protocol_bindings:
        config.supported_protocol_bindings = [BINDING_UNIX, *config.supported_protocol_bindings]
    factory = ClientFactory(config)

    def produce(card: AgentCard, url: str, _config: ClientConfig) -> JsonRpcTransport:
        # `url` is the card's unix:///... URL: deliberately not dialed. The
        # transport POSTs to "/" relative to BASE_URL, i.e. to the socket.
        return JsonRpcTransport(unix_http_client(socket_path), card, '/', is_shared_httpx=False)

    factory.register(BINDING_UNIX, produce)
    return factory


async def connect(socket_path: str, streaming: bool = True, card: AgentCard | None = None) -> Client:
    """A ready SDK client for the agentd listening on ``socket_path``.

    ``streaming=False`` makes ``client.send_message`` a blocking
    SendMessage (one result); ``True`` uses SendStreamingMessage when the
    card says the agent streams. Close the client (``async with`` or
    ``await client.close()``) to close its socket connections.
    """
    if card is None:
        card = await fetch_card(socket_path)
    return client_factory(socket_path, ClientConfig(streaming=streaming)).create(card)
