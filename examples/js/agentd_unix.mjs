// Talk to agentd from the official A2A JavaScript SDK (`@a2a-js/sdk` 1.x).
//
// agentd serves the A2A JSON-RPC binding as HTTP/1.1 on a unix socket and
// labels that interface with its own binding URI,
// `https://agentd.dev/a2a/binding/jsonrpc-unix`, whose card URL is
// `unix:///path/to/agentd.sock`. A stock SDK `ClientFactory` knows only the
// `JSONRPC` and `HTTP+JSON` bindings, so it (rightly) refuses the card. This
// module teaches it, using only hooks the SDK documents:
//
// * `unixFetch(path)` -- a `fetch` whose every request goes to the socket:
//   undici's `fetch` with a `dispatcher` that is an undici `Agent` built with
//   `connect: { socketPath }`. The URL's host (we use the dummy base URL
//   `http://agentd`) only fills the Host header, which means nothing on a
//   socket. The SDK takes such a function wherever it makes HTTP requests:
//   `fetchImpl` on `DefaultAgentCardResolver` and `JsonRpcTransportFactory`.
// * `fetchCard(path)` -- the SDK's own `DefaultAgentCardResolver` over it.
// * `UnixJsonRpcTransportFactory` -- a `TransportFactory` whose
//   `protocolName` is our binding URI; `create()` hands back the SDK's own
//   JSON-RPC transport (from `JsonRpcTransportFactory`) on the socket fetch.
// * `clientFactory(path)` -- a `ClientFactory` with that transport factory
//   (and only it): the factory's own card-based interface selection then
//   picks the unix interface from the card.
// * `connect(path)` -- all of it in one call: `{ client, card, close }`.
//
// The dial always goes to the socket path the caller names, never to a URL
// the card carries (the card's `unix:///` URL is only how the interface is
// labelled; behind a bind mount it may name another path). That is also why
// the factory gets no stock transports: with them, a card that also listed
// a `JSONRPC` interface would make the SDK dial that card URL.
//
// Needs `@a2a-js/sdk` and `undici` (npm). Node's global `fetch` is undici
// too and honours `dispatcher`, but it is the copy bundled with Node, whose
// version need not match the installed `undici` that builds the `Agent`;
// undici's own `fetch` always matches its own `Agent`.
//
//     import { connect } from './agentd_unix.mjs';
//     import { SendMessageRequest } from '@a2a-js/sdk';
//
//     const agentd = await connect('/run/agentd/agentd.sock');
//     try {
//       const request = SendMessageRequest.fromJSON({
//         message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hello' }] },
//       });
//       const task = await agentd.client.sendMessage(request); // blocking: a finished Task
//       console.log(task.status.state, task.artifacts);
//       for await (const event of agentd.client.sendMessageStream(request)) {
//         console.log(event.payload.$case, event.payload.value);
//       }
//     } finally {
//       await agentd.close();
//     }

import { Agent, fetch as undiciFetch } from 'undici';
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';

/** The protocolBinding agentd puts on a unix-socket interface. */
export const BINDING_UNIX = 'https://agentd.dev/a2a/binding/jsonrpc-unix';
/** Any base URL will do: the socket is the destination, Host is ignored. */
export const BASE_URL = 'http://agentd';
/** Where the JSON-RPC transport POSTs (agentd serves JSON-RPC at `/`). */
export const ENDPOINT = `${BASE_URL}/`;

/**
 * A `fetch` that sends every request to the unix socket at `socketPath`.
 *
 * Returned with `close()` (closes the pooled socket connections; a pending
 * stream ends) and `dispatcher` (the undici `Agent`). Streaming responses may
 * stay quiet for up to `bodyTimeoutMs` between chunks; agentd sends a
 * keep-alive comment every 15 s, so anything above that is safe.
 */
export function unixFetch(socketPath, { bodyTimeoutMs = 60_000, headersTimeoutMs = 60_000 } = {}) {
  const dispatcher = new Agent({
    connect: { socketPath },
    bodyTimeout: bodyTimeoutMs,
    headersTimeout: headersTimeoutMs,
  });
  const fetchOverSocket = (input, init = {}) => undiciFetch(input, { ...init, dispatcher });
  fetchOverSocket.dispatcher = dispatcher;
  fetchOverSocket.close = () => dispatcher.close();
  return fetchOverSocket;
}

/** A socket path or a fetch from `unixFetch`, as a fetch (and whether we made it). */
function fetchFor(socketOrFetch) {
  return typeof socketOrFetch === 'function'
    ? { fetchImpl: socketOrFetch, owned: false }
    : { fetchImpl: unixFetch(socketOrFetch), owned: true };
}

/** GET /.well-known/agent-card.json on the socket, with the SDK's resolver. */
export async function fetchCard(socketOrFetch) {
  const { fetchImpl, owned } = fetchFor(socketOrFetch);
  try {
    return await new DefaultAgentCardResolver({ fetchImpl }).resolve(BASE_URL);
  } finally {
    if (owned) await fetchImpl.close();
  }
}

/**
 * The SDK's JSON-RPC transport, registered under agentd's binding URI.
 *
 * `create(url, card)` gets the card's `unix:///...` URL from the factory:
 * deliberately not dialed. The transport POSTs to `ENDPOINT` through the
 * socket fetch instead.
 */
export class UnixJsonRpcTransportFactory {
  constructor(fetchImpl) {
    this.jsonRpc = new JsonRpcTransportFactory({ fetchImpl });
  }

  get protocolName() {
    return BINDING_UNIX;
  }

  async create(_cardUrl, agentCard) {
    return this.jsonRpc.create(ENDPOINT, agentCard);
  }
}

/**
 * A `ClientFactory` that selects agentd's unix interface from a card.
 *
 * `socketOrFetch` is a socket path or a fetch from `unixFetch` (a path makes
 * a fetch the caller cannot close: prefer passing one, or use `connect`).
 * `clientConfig` is the SDK's `ClientConfig` (`polling`, interceptors, …).
 */
export function clientFactory(socketOrFetch, clientConfig = undefined) {
  const { fetchImpl } = fetchFor(socketOrFetch);
  return new ClientFactory({
    transports: [new UnixJsonRpcTransportFactory(fetchImpl)],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    clientConfig,
  });
}

/**
 * A ready SDK client for the agentd listening on `socketPath`.
 *
 * Resolves to `{ client, card, fetch, close }`: `client.sendMessage` is a
 * blocking SendMessage (set `clientConfig.polling` for returnImmediately),
 * `client.sendMessageStream` a SendStreamingMessage. `close()` closes the
 * socket connections. `card` may be passed to skip fetching it again.
 */
export async function connect(socketPath, { card = undefined, clientConfig = undefined, ...fetchOptions } = {}) {
  const fetchImpl = unixFetch(socketPath, fetchOptions);
  try {
    card = card ?? (await fetchCard(fetchImpl));
    const client = await clientFactory(fetchImpl, clientConfig).createFromAgentCard(card);
    return { client, card, fetch: fetchImpl, close: () => fetchImpl.close() };
  } catch (e) {
    await fetchImpl.close();
    throw e;
  }
}
