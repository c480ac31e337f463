// Fusebox circuit breakers for Node: the pod's breakers, decided by its fuseboxd sidecar
// and so shared by every process of the pod (docs/clients.md).

import { Client } from './client.js';

export { Breaker, Client, DEFAULT_SOCKET } from './client.js';
export { CircuitOpen, FuseboxError, SidecarError, SidecarUnreachable } from './errors.js';
export { Outcome, State, Unreachable } from './sidecar.js';

let shared = null;

/**
 * The process's client of the sidecar at DEFAULT_SOCKET, made on first use, so that every
 * breaker made by breaker() shares its connections and its back-off.
 */
export function defaultClient() {
  shared ??= new Client();
  return shared;
}

/** A breaker of the pod, by its CircuitBreaker name, through defaultClient(). */
export function breaker(name, options) {
  return defaultClient().breaker(name, options);
}
