//! What the live source's threads send the viewer: a connection's frames, its end, the child's
//! output and exit, and notices. A module of its own because every thread that feeds the
//! viewer (the socket's readers, the child's watcher, the CPU sampler) sends it, and the
//! sampler must not import the socket's code that starts it.

use gaptop_wire::Frame;

/// One message from a live source's thread to the viewer.
pub enum LiveEvent {
    /// Decoded frames from one connection.
    Frames(u32, Vec<Frame>),
    /// A connection ended; `Some` says why when it was a protocol error.
    Closed(u32, Option<String>),
    /// A line the child wrote on stdout or stderr (when captured).
    Output(String),
    /// The child exited with this description.
    Exited(String),
    /// Something to say once about the capture (CPU sampling refused, say).
    Notice(String),
}
