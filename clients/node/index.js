export { Client, Queue, Message, Ring, Rotation, Schedule } from "./src/client.js";
export { Worker, errorText } from "./src/worker.js";
export {
  SqlqError, BadRequest, Unauthorized, Forbidden, NotFound, AlreadyExists, StaleReceipt,
  Conflict, TooManyRequests, Unavailable, ServerTimeout, OutcomeUnknown, ServerError,
  ConnectionFailed,
} from "./src/errors.js";
