//! Listening to GDAL's messages on one thread for a while: a handler
//! pushed on GDAL's per-thread stack notes whether any message matched,
//! and forwards every message to `tracing` as the process-wide handler
//! does (see [`super::init`]). `write` uses it to tell a full disk from
//! other failures (see `write/space.rs`).

use std::ffi::{c_char, CStr};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

use gdal_sys as sys;

/// What the handler reads: the test and whether a message passed it.
#[derive(Debug)]
struct Heard {
    matches: fn(&str) -> bool,
    said: AtomicBool,
}

/// While it lives, GDAL's messages on this thread go through `on_message`,
/// which notes one that `matches` and forwards every message to
/// `tracing`. Not `Send`: GDAL's handler stack is per thread.
#[derive(Debug)]
pub struct MessageWatch {
    /// Boxed: GDAL holds its address until the handler is popped.
    heard: Box<Heard>,
    pushed: bool,
    _one_thread: PhantomData<*const ()>,
}

impl MessageWatch {
    /// Starts watching for a message that `matches`.
    pub fn start(matches: fn(&str) -> bool) -> Self {
        let heard = Box::new(Heard {
            matches,
            said: AtomicBool::new(false),
        });
        let data: *const Heard = &*heard;
        // SAFETY: `on_message` never unwinds; `data` points into
        // the box this watch owns, which outlives the handler: `Drop` pops
        // it first.
        unsafe { sys::CPLPushErrorHandlerEx(Some(on_message), data as *mut std::ffi::c_void) };
        MessageWatch {
            heard,
            pushed: true,
            _one_thread: PhantomData,
        }
    }

    /// Stops watching; whether a message matched.
    pub fn matched(mut self) -> bool {
        self.pop();
        self.heard.said.load(Ordering::Relaxed)
    }

    fn pop(&mut self) {
        if std::mem::take(&mut self.pushed) {
            // SAFETY: pops the handler this watch pushed on this thread (it
            // is not `Send`); GDAL pushes and pops its own in pairs.
            unsafe { sys::CPLPopErrorHandler() };
        }
    }
}

impl Drop for MessageWatch {
    fn drop(&mut self) {
        self.pop();
    }
}

/// The handler a [`MessageWatch`] pushes. Must never panic: it is called
/// from C.
unsafe extern "C" fn on_message(
    class: sys::CPLErr::Type,
    code: sys::CPLErrorNum,
    msg: *const c_char,
) {
    if msg.is_null() {
        return;
    }
    // SAFETY: GDAL passes its message as a NUL-terminated string valid for
    // this call.
    let message = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
    // SAFETY: the user data is the `Heard` of the `MessageWatch` that
    // pushed this handler, alive until that watch pops it; null only if
    // GDAL lost the user data.
    let heard = unsafe { (sys::CPLGetErrorHandlerUserData() as *const Heard).as_ref() };
    if let Some(heard) = heard {
        if (heard.matches)(&message) {
            heard.said.store(true, Ordering::Relaxed);
        }
    }
    super::forward(class.into(), code, &message);
}

/// Reports `message` as a GDAL failure on this thread, as a driver would
/// (for tests of what hears GDAL's messages).
pub fn report_failure(message: &str) {
    let c = std::ffi::CString::new(message).expect("a test message without NUL bytes");
    // SAFETY: a constant format and one string argument.
    unsafe { sys::CPLError(sys::CPLErr::CE_Failure, 1, c"%s".as_ptr(), c.as_ptr()) };
}
