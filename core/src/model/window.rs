//! A span of the capture's time that an analysis, a report or an export looks at: `[from, to)`,
//! either bound open.

use crate::model::records::Ns;
use crate::model::store::Store;

/// A time window [from, to); `None` bounds are open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<Ns>,
    pub to: Option<Ns>,
}

impl Window {
    pub fn all() -> Self {
        Window::default()
    }
    pub fn new(from: Ns, to: Ns) -> Self {
        Window {
            from: Some(from),
            to: Some(to),
        }
    }
    pub fn lo(&self) -> Ns {
        self.from.unwrap_or(Ns::MIN)
    }
    pub fn hi(&self) -> Ns {
        self.to.unwrap_or(Ns::MAX)
    }

    /// The window clipped to the capture's span: what a summary of it covers (`Summary::lo`,
    /// `Summary::hi`).
    pub fn clipped(&self, store: &Store) -> (Ns, Ns) {
        let (span_lo, span_hi) = store.span().unwrap_or((0, 0));
        let lo = self.lo().max(span_lo);
        (lo, self.hi().min(span_hi).max(lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_clipped_to_the_captures_span() {
        let empty = Store::new(usize::MAX);
        assert_eq!(Window::all().clipped(&empty), (0, 0));
        assert_eq!(
            Window::new(5, 3).clipped(&empty),
            (5, 5),
            "never ends before it starts"
        );
        assert_eq!((Window::all().lo(), Window::all().hi()), (Ns::MIN, Ns::MAX));
    }
}
