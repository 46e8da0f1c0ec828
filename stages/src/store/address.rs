//! An object's address in a store: `s3://BUCKET/KEY`,
//! `az://CONTAINER/BLOB` or `gs://BUCKET/OBJECT`, and what each store
//! calls things.

use object_store::path::Path as ObjectPath;
use warpline_engine::redact::redact_text;
use warpline_engine::StageError;

/// An object store warpline reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    /// `s3://`: Amazon S3 or an S3-compatible server.
    S3,
    /// `az://`: Azure Blob Storage or Azurite.
    Az,
    /// `gs://`: Google Cloud Storage or fake-gcs-server; read only (see
    /// [`Scheme::writes`]).
    Gs,
}

impl Scheme {
    const ALL: [Scheme; 3] = [Scheme::S3, Scheme::Az, Scheme::Gs];

    /// The scheme of `text`, if it names an object in a store.
    pub(crate) fn of(text: &str) -> Option<Scheme> {
        Scheme::ALL
            .into_iter()
            .find(|s| text.starts_with(s.prefix()))
    }

    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Scheme::S3 => "s3://",
            Scheme::Az => "az://",
            Scheme::Gs => "gs://",
        }
    }

    /// What the store calls a bucket.
    pub(crate) fn bucket_word(self) -> &'static str {
        match self {
            Scheme::S3 | Scheme::Gs => "bucket",
            Scheme::Az => "container",
        }
    }

    /// Where credentials come from, for messages.
    pub(super) fn credentials(self) -> &'static str {
        match self {
            Scheme::S3 => "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN",
            Scheme::Az => {
                "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_KEY"
            }
            Scheme::Gs => {
                "GOOGLE_SERVICE_ACCOUNT (a service account key file), GOOGLE_SERVICE_ACCOUNT_KEY \
                 or GOOGLE_APPLICATION_CREDENTIALS"
            }
        }
    }

    /// Whether outputs may be written to this store: not to `gs://`, whose
    /// uploads (`object_store`'s XML API PUT and multipart upload) no
    /// server the tests can run accepts (fake-gcs-server 1.54 answers
    /// both with 400 "invalid uploadType"), and warpline does not ship
    /// what it cannot test.
    pub(crate) fn writes(self) -> Result<(), String> {
        match self {
            Scheme::S3 | Scheme::Az => Ok(()),
            Scheme::Gs => Err(
                "gs:// is read, not written: outputs go to a local directory, \
                 s3:// or az:// (the GCS emulator the tests run does not take object_store's \
                 uploads, and warpline does not ship what it cannot test)"
                    .to_owned(),
            ),
        }
    }

    /// A name a bucket (container) may have: 3 to 63 lower-case letters,
    /// digits and `-` (and `.` on S3 and GCS, `_` on GCS).
    fn bucket_ok(self, name: &str) -> bool {
        (3..=63).contains(&name.len())
            && name.chars().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || c == '-'
                    || (c == '.' && self != Scheme::Az)
                    || (c == '_' && self == Scheme::Gs)
            })
    }
}

/// Whether an input or output names an object in a store (`s3://`,
/// `az://`, `gs://`).
pub(crate) fn is_store(text: &str) -> bool {
    Scheme::of(text).is_some()
}

/// An object's address, `s3://BUCKET/KEY`, `az://CONTAINER/BLOB` or
/// `gs://BUCKET/OBJECT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectUrl {
    pub(crate) scheme: Scheme,
    pub(crate) bucket: String,
    pub(crate) key: String,
}

impl ObjectUrl {
    /// Parses `s3://BUCKET/KEY`, `az://CONTAINER/BLOB` or
    /// `gs://BUCKET/OBJECT` (the key may be empty: a bucket or prefix).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let scheme = Scheme::of(text)
            .ok_or_else(|| format!("{text:?} is not an s3://, az:// or gs:// URL"))?;
        let rest = &text[scheme.prefix().len()..];
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if !scheme.bucket_ok(bucket) {
            let dot = match scheme {
                Scheme::S3 => ", `.`",
                Scheme::Az => "",
                Scheme::Gs => ", `.`, `_`",
            };
            return Err(format!(
                "{:?}: {bucket:?} is not a {} name (3 to 63 lower-case letters, digits, `-`{dot})",
                redact_text(text),
                scheme.bucket_word()
            ));
        }
        if key.contains(['?', '#']) {
            return Err(format!(
                "{:?}: an {} URL has no query or fragment",
                redact_text(text),
                scheme.prefix()
            ));
        }
        Ok(ObjectUrl {
            scheme,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The key as `object_store` names it.
    pub(crate) fn path(&self) -> Result<ObjectPath, StageError> {
        ObjectPath::parse(&self.key)
            .map_err(|e| StageError::permanent(format!("{self}: not an object key: {e}")))
    }

    /// The same store and bucket, another key.
    pub(crate) fn with_key(&self, key: impl Into<String>) -> ObjectUrl {
        ObjectUrl {
            scheme: self.scheme,
            bucket: self.bucket.clone(),
            key: key.into(),
        }
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}/{}", self.scheme.prefix(), self.bucket, self.key)
    }
}
