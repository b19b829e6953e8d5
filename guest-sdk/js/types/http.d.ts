// Type declarations of @tollgate/guest/http (src/http.js): fetch over wasi:http that tells a
// refused destination apart from a transport failure.

/** A request that produced no response. */
export class HttpError extends TypeError {
  constructor(url: string, code: string, detail?: string);
  /** The wasi:http error-code case, such as `HTTP-request-denied` or `connection-refused`. */
  readonly code: string;
  /** The host refused the destination (not on the component's allow-list). */
  readonly denied: boolean;
}

export interface FetchInit {
  method?: string;
  headers?: Record<string, string> | Array<[string, string]> | { forEach(cb: (value: string, name: string) => void): void };
  body?: string | Uint8Array | ArrayBuffer;
}

export interface HttpResponse {
  readonly url: string;
  readonly status: number;
  readonly ok: boolean;
  readonly headers: { get(name: string): string | null };
  text(): Promise<string>;
  json(): Promise<unknown>;
  arrayBuffer(): Promise<ArrayBuffer>;
}

/** fetch(url, { method, headers, body }) over wasi:http; rejects with an HttpError. */
export function fetch(input: string | URL, init?: FetchInit): Promise<HttpResponse>;
