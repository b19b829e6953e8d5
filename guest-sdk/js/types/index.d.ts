// Type declarations of @tollgate/guest (src/index.js): what a tool module imports, and the shape
// of the `tools` it exports.

/** The JSON arguments of a call, already validated by the host against `inputSchema`. */
export type Args = Record<string, unknown>;

/** A deferred call's context (`undefined` for an inline read). */
export interface Execution {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  attempt: number;
  /** The same on every attempt of one call: pass it to the service you call. */
  idempotencyKey: string;
}

export interface TextBlock {
  type: 'text';
  text: string;
}

export interface ImageBlock {
  type: 'image';
  mediaType: string;
  data: Uint8Array;
}

export type Block = TextBlock | ImageBlock;

export interface Output {
  content: Block[];
  isError?: boolean;
}

/** What a handler returns: one text block, blocks, or an output. */
export type Result = string | Block | Block[] | Output;

export interface Annotations {
  readOnly?: boolean;
  destructive?: boolean;
  idempotent?: boolean;
  openWorld?: boolean;
}

/** One tool of the module's `export const tools = [...]`. */
export interface Tool<A extends Args = Args> {
  name: string;
  description: string;
  /**
   * A JSON Schema object for the arguments. Without it, the build derives one from the JSDoc type
   * of the handler's first parameter (`@param {Args} args`).
   */
  inputSchema?: Record<string, unknown>;
  annotations?: Annotations;
  handler(args: A, execution: Execution | undefined): Result | Promise<Result>;
}

/** The error a handler throws for WIT `call-error.retryable`: a transient failure. */
export function retryable(message: unknown): Error;
/** The error a handler throws for WIT `call-error.failed`: a permanent failure. */
export function failed(message: unknown): Error;
/** `'retryable'` or `'failed'` for an error made by retryable()/failed(), else undefined. */
export function callErrorKind(err: unknown): 'retryable' | 'failed' | undefined;
/** A text content block. */
export function text(s: unknown): TextBlock;
/** An image content block: `data` is the encoded image. */
export function image(mediaType: string, data: Uint8Array): ImageBlock;
/** An output the model reads as a tool-level failure: recorded, never retried. */
export function errorOutput(message: string): Output;

type LogFn = (message: unknown) => void;
/** Writes to the host's log (bounded in length and count). */
export const log: Readonly<{ trace: LogFn; debug: LogFn; info: LogFn; warn: LogFn; error: LogFn }>;
/** The value of config key `key` when the manifest grants it and a value is set. */
export function config(key: string): string | undefined;
