// `cudaAgent.server.address`: where a headless `cuda-agent serve --tcp` listens.

export type ServerAddress = { host: string; port: number };
export type ParsedAddress = { ok: true; address: ServerAddress } | { ok: false; error: string };

/**
 * "host:port", "[::1]:port" or "tcp://host:port". Returns null for an empty setting (start the server
 * locally instead).
 */
export function parseServerAddress(text: string): ParsedAddress | null {
  let rest = text.trim();
  if (rest === '') {
    return null;
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(rest);
  if (scheme) {
    if (scheme[1].toLowerCase() !== 'tcp') {
      return fail(
        `${text}: VS Code connects over TCP; start the server with \`cuda-agent serve --tcp\` and give host:port`,
      );
    }
    rest = rest.slice(scheme[0].length).replace(/\/$/, '');
  }
  let host: string;
  let port: string;
  const bracketed = /^\[([^\]]+)\]:(\d+)$/.exec(rest); // IPv6 needs brackets to keep its colons apart
  if (bracketed) {
    [, host, port] = bracketed;
  } else {
    const colon = rest.lastIndexOf(':');
    if (colon <= 0 || rest.indexOf(':') !== colon) {
      return fail(`${text}: expected host:port, e.g. localhost:2087 (IPv6: [::1]:2087)`);
    }
    host = rest.slice(0, colon);
    port = rest.slice(colon + 1);
  }
  if (!/^\d+$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    return fail(`${text}: the port must be a number from 1 to 65535`);
  }
  if (/\s|\//.test(host)) {
    return fail(`${text}: "${host}" is not a host name or address`);
  }
  return { ok: true, address: { host, port: Number(port) } };
}

export function formatAddress(address: ServerAddress): string {
  return address.host.includes(':') ? `[${address.host}]:${address.port}` : `${address.host}:${address.port}`;
}

function fail(error: string): ParsedAddress {
  return { ok: false, error };
}
