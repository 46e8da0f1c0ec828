//! The count kind: a fixed number of interchangeable slots (sockets,
//! cores, descriptors), one per item, on a tokio semaphore.

use std::num::NonZeroU32;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// A count limiter's own state.
pub(super) struct Count {
    pub(super) sem: Arc<Semaphore>,
    permits: u32,
}

impl Count {
    pub(super) fn new(permits: NonZeroU32) -> Self {
        let permits = permits.get();
        Count {
            sem: Arc::new(Semaphore::new(permits as usize)),
            permits,
        }
    }

    /// Its slots.
    pub(super) fn capacity(&self) -> u64 {
        u64::from(self.permits)
    }

    /// Its free slots.
    pub(super) fn available(&self) -> u64 {
        self.sem.available_permits() as u64
    }
}
