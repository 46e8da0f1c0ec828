//! What a stage declares it takes from the stage before it and hands on to
//! the next: a payload type, or "any". The flow is known when the pipeline
//! compiles, so each adjacent pair of stages is checked there once (a
//! mismatch is a `validate` error naming both stages and both types), not
//! found item by item at run time.

use std::any::{type_name, Any, TypeId};
use std::fmt;

/// A payload type as a stage declares it, or [`Payload::ANY`].
#[derive(Clone, Copy)]
pub struct Payload {
    type_id: Option<TypeId>,
    type_name: &'static str,
    what: &'static str,
}

impl Payload {
    /// No declaration: any payload (or none) is accepted, or may be handed
    /// on. The default of every stage.
    pub const ANY: Payload = Payload {
        type_id: None,
        type_name: "",
        what: "any payload",
    };

    /// The payload type `T`, described to the user as `what` (for example
    /// "a raster").
    pub fn of<T: Any>(what: &'static str) -> Self {
        Payload {
            type_id: Some(TypeId::of::<T>()),
            type_name: type_name::<T>(),
            what,
        }
    }

    /// The type's name as the user should read it, when `T` is re-exported
    /// under a shorter path than the one it is defined at (which
    /// `std::any::type_name` gives).
    pub fn shown_as(self, type_name: &'static str) -> Self {
        Payload { type_name, ..self }
    }

    /// Whether this is [`Payload::ANY`].
    pub fn is_any(&self) -> bool {
        self.type_id.is_none()
    }

    /// Whether a stage that takes `self` can follow one that hands on
    /// `handed`: either is "any", or both are the same type.
    pub fn accepts(&self, handed: &Payload) -> bool {
        match (self.type_id, handed.type_id) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

impl fmt::Display for Payload {
    /// "a raster (warpline_stages::gdal::Raster)", or "any payload".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_any() {
            f.write_str(self.what)
        } else {
            write!(f, "{} ({})", self.what, self.type_name)
        }
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::Payload;

    #[test]
    fn any_accepts_and_is_accepted_by_everything() {
        let s = Payload::of::<String>("a word");
        let n = Payload::of::<u64>("a number");
        assert!(Payload::ANY.accepts(&s));
        assert!(s.accepts(&Payload::ANY));
        assert!(s.accepts(&Payload::of::<String>("text")));
        assert!(!s.accepts(&n));
        let shown = s.to_string();
        assert!(
            shown.starts_with("a word (") && shown.ends_with("String)"),
            "{shown}"
        );
        assert_eq!(Payload::ANY.to_string(), "any payload");
    }
}
