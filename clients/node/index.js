export { Client, Queue, Message, Ring, Rotation, Schedule, Topic } from "./src/client.js";
export { Worker, errorText } from "./src/worker.js";
export {
  SqlqError, BadRequest, Unauthorized, Forbidden, NotFound, AlreadyExists, StaleReceipt,
  Conflict, TooManyRequests, Unavailable, ServerTimeout, OutcomeUnknown, ServerError,
  ConnectionFailed, JobFailed, ResultTimeout,
} from "./src/errors.js";
export { Snooze, RetryAfter, Permanent, Cancel } from "./src/outcomes.js";
export { Workflow, Step, chain, group, chord, findWorkflow, cancelWorkflow,
  retryWorkflow } from "./src/flow.js";
