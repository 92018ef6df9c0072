// Types of sqlq/testing (test/types_check.ts uses them).

import type { Client, Queue, Handler, Handlers, WorkerOptions, InlineResult } from "./index.js";

/** Claims every ready message of the queue(s) and runs each once through
 * the handlers, as a Worker would settle it, without the worker's loop. */
export function runInline(client: Client, queue: string | Queue | Array<string | Queue>,
                          handlers: Handler | Handlers,
                          options?: WorkerOptions): Promise<InlineResult[]>;
