//! [`Limits`]: named limiters in their one acquisition order.

use std::sync::Arc;

use super::Limiter;

/// [`Limits::add`] was given a limiter whose name is taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a limiter named `{0}` exists already")]
pub struct DuplicateLimiter(pub String);

/// Named limiters in their acquisition order: a pipeline's, or a set that
/// several pipelines share (see [`Loader::with_limits`](crate::Loader::with_limits)).
///
/// ```
/// use std::num::NonZeroU32;
/// use warpline_engine::limit::{Limiter, Limits, Oversize};
///
/// let mut shared = Limits::new();
/// shared.add(Limiter::count("connections", NonZeroU32::new(8).unwrap())).unwrap();
/// shared.add(Limiter::bytes("memory", 512 << 20, Oversize::Fail)).unwrap();
/// assert_eq!(shared.position("memory"), Some(1));
/// assert!(shared.add(Limiter::count("memory", NonZeroU32::MIN)).is_err());
///
/// // The error works with `?` in a function returning any boxed error.
/// fn more(shared: &mut Limits) -> Result<(), Box<dyn std::error::Error>> {
///     shared.add(Limiter::count("cpu", NonZeroU32::new(4).unwrap()))?;
///     Ok(())
/// }
/// more(&mut shared).unwrap();
/// assert_eq!(
///     more(&mut shared).unwrap_err().to_string(),
///     "a limiter named `cpu` exists already"
/// );
/// ```
#[derive(Debug, Clone, Default)]
pub struct Limits {
    by_order: Vec<Limiter>,
}

impl Limits {
    /// No limiters.
    pub fn new() -> Self {
        Limits::default()
    }

    /// Adds a limiter after the others; a name may be used once. The error
    /// is a [`std::error::Error`], so `?` turns it into an `anyhow::Error`
    /// or a `Box<dyn Error>`.
    pub fn add(&mut self, limiter: Limiter) -> Result<(), DuplicateLimiter> {
        if self.get(limiter.name()).is_some() {
            return Err(DuplicateLimiter(limiter.name().to_owned()));
        }
        self.by_order.push(limiter);
        Ok(())
    }

    pub(crate) fn push(&mut self, limiter: Limiter) {
        self.by_order.push(limiter);
    }

    /// The limiter with this name.
    pub fn get(&self, name: &str) -> Option<&Limiter> {
        self.by_order.iter().find(|l| l.name() == name)
    }

    /// Where the limiter with this name stands in the acquisition order.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.by_order.iter().position(|l| l.name() == name)
    }

    /// All limiters, in acquisition order.
    pub fn iter(&self) -> impl Iterator<Item = &Limiter> {
        self.by_order.iter()
    }

    /// How many limiters there are.
    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// Whether `limiter` is this very limiter (shared), not one with the
    /// same name.
    pub fn holds(&self, limiter: &Limiter) -> bool {
        self.by_order
            .iter()
            .any(|l| Arc::ptr_eq(&l.inner, &limiter.inner))
    }
}
