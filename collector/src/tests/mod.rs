//! The collector's unit tests, one file per concern: record decoding (`records`), queues,
//! buffers and framing (`buffers`), open calls and call plans (`calls`), and replays of
//! recorded CUPTI buffers (`replay`).

mod buffers;
mod calls;
mod records;
mod replay;
