/**
 * Which transport a client uses: TLS, except to this machine's loopback addresses.
 *
 * The same rule as the Python client (`cairn.channels`): an API key never crosses a network in
 * plaintext unless the caller says `tls: false`, while `./dev up` and tests on 127.0.0.1 work
 * without certificates.
 */

import { isIPv4, isIPv6 } from "node:net";

import * as grpc from "@grpc/grpc-js";

/** TLS settings. All PEM; every field is optional. */
export interface TlsOptions {
  /** Root certificates to trust instead of the system's, e.g. a private CA. */
  rootCerts?: Buffer;
  /** A client certificate chain and its key, for mutual TLS (both or neither). */
  certChain?: Buffer;
  privateKey?: Buffer;
  /** The name to check the server's certificate against, when not the address's host. */
  serverName?: string;
}

/**
 * `undefined`: TLS with the system's roots, or plaintext to a loopback address.
 * `false`: plaintext. `true`: TLS with the system's roots. An object: TLS with those settings.
 */
export type Tls = boolean | TlsOptions | undefined;

function hostOf(address: string): string {
  const target = address.replace(/^dns:\/\/\//, "").replace(/^ipv[46]:/, "");
  if (target.startsWith("[")) return target.slice(1, target.indexOf("]"));
  if (target.split(":").length > 2) return target; // a bare IPv6 address without a port
  const colon = target.lastIndexOf(":");
  return colon === -1 ? target : target.slice(0, colon);
}

/** True for addresses that never leave this machine: loopback hosts and unix sockets. */
export function isLoopback(address: string): boolean {
  if (address.startsWith("unix:") || address.startsWith("unix-abstract:")) return true;
  const host = hostOf(address);
  if (host === "localhost") return true;
  if (isIPv4(host)) return host.split(".")[0] === "127";
  if (isIPv6(host)) return new URL(`http://[${host}]/`).hostname === "[::1]";
  return false;
}

/** Whether a client of `address` with these settings uses TLS. */
export function usesTls(address: string, tls: Tls): boolean {
  return tls === undefined ? !isLoopback(address) : tls !== false;
}

/** The grpc-js credentials and channel options for `address`. */
export function channelSettings(
  address: string,
  tls: Tls,
): { credentials: grpc.ChannelCredentials; options: grpc.ChannelOptions } {
  if (!usesTls(address, tls)) {
    return { credentials: grpc.credentials.createInsecure(), options: {} };
  }
  const settings: TlsOptions = typeof tls === "object" ? tls : {};
  if ((settings.certChain === undefined) !== (settings.privateKey === undefined)) {
    throw new Error("a client certificate needs both certChain and privateKey");
  }
  const credentials = grpc.credentials.createSsl(
    settings.rootCerts ?? null,
    settings.privateKey ?? null,
    settings.certChain ?? null,
  );
  const options: grpc.ChannelOptions = {};
  if (settings.serverName) {
    options["grpc.ssl_target_name_override"] = settings.serverName;
    options["grpc.default_authority"] = settings.serverName;
  }
  return { credentials, options };
}
