//! A run over STAC documents (an ItemCollection and its `next` pages, a
//! search's pages, a catalog's links), one document at a time, the next
//! read while the inputs of the one before are taken: never more than one
//! document ahead, and only as far as admission asks for inputs.

use std::collections::{HashSet, VecDeque};

use async_trait::async_trait;
use serde_json::{Map, Value};
use url::Url;
use warpline_engine::redact::redact;
use warpline_engine::{Input, Source, SourceError};

use super::inputs::{Maker, Taken};
use super::read::{self, link, Document, Link, Reader, Request};
use super::Kind;

/// A document to read, with the POST body it was asked with (a `next`
/// link may say to merge into it).
pub(super) type Todo = (Request, Option<Map<String, Value>>);

/// The document being read ahead: a task of its own, stopped if the run
/// ends first.
struct Ahead {
    req: Request,
    body: Option<Map<String, Value>>,
    task: tokio::task::JoinHandle<Result<(Document, Url), String>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) struct StacRun {
    pub(super) kind: Kind,
    /// The first document, as shown in messages.
    pub(super) origin: String,
    pub(super) reader: Reader,
    /// Documents still to read: a stack (the last pushed is read first).
    pub(super) todo: Vec<Todo>,
    /// The documents read so far (a hash of each request), to stop at a
    /// loop: 8 bytes a page.
    pub(super) read: HashSet<u64>,
    /// The inputs of the last document read, not yet taken.
    pub(super) pending: VecDeque<Taken>,
    pub(super) maker: Maker,
    pub(super) pages: u64,
    pub(super) ended: bool,
    ahead: Option<Ahead>,
}

impl StacRun {
    pub(super) fn new(kind: Kind, reader: Reader, first: Todo, maker: Maker) -> Self {
        StacRun {
            kind,
            origin: first.0.shown(),
            reader,
            todo: vec![first],
            read: HashSet::new(),
            pending: VecDeque::new(),
            maker,
            pages: 0,
            ended: false,
            ahead: None,
        }
    }
}

#[async_trait]
impl Source for StacRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        loop {
            if let Some(input) = self.pending.pop_front() {
                return Some(input);
            }
            if self.ended {
                return None;
            }
            let ahead = match self.ahead.take() {
                Some(ahead) => ahead,
                None => match self.launch() {
                    Some(Ok(ahead)) => ahead,
                    Some(Err(e)) => return Some(Err(e)),
                    None => {
                        self.ended = true;
                        return (self.maker.items == 0).then(|| {
                            Err(SourceError {
                                id: self.origin.clone(),
                                message: format!("{}: no STAC items found", self.origin),
                            })
                        });
                    }
                },
            };
            if let Some(e) = self.settle(ahead).await {
                return Some(Err(e));
            }
        }
    }
}

impl StacRun {
    /// Starts reading the next document to read, if there is one: `None`
    /// when there is none, an error for a link back to one read before.
    fn launch(&mut self) -> Option<Result<Ahead, SourceError>> {
        let (req, body) = self.todo.pop()?;
        if !self.read.insert(crate::ids::fingerprint(&req)) {
            return Some(Err(self.loop_error(&req)));
        }
        let (reader, asked) = (self.reader.clone(), req.clone());
        let task = tokio::spawn(async move { reader.read(&asked).await });
        Some(Ok(Ahead { req, body, task }))
    }

    /// Takes the document read ahead into `pending` (its inputs, or what
    /// went wrong), and starts reading the one after; an error to hand on
    /// at once when the document could not be read.
    async fn settle(&mut self, mut ahead: Ahead) -> Option<SourceError> {
        let read = match (&mut ahead.task).await {
            Ok(read) => read,
            Err(e) => Err(format!("{}: its read stopped: {e}", ahead.req.shown())),
        };
        let (req, body) = (ahead.req.clone(), ahead.body.take());
        match read {
            Ok((doc, base)) => {
                self.pages += 1;
                if let Err(message) = self.take(doc, &req, &base, body) {
                    // Not a page: no `next` link to follow either.
                    if self.kind != Kind::Catalog {
                        self.ended = true;
                    }
                    self.pending.push_back(Err(SourceError {
                        id: req.shown(),
                        message,
                    }));
                }
                self.read_ahead();
                None
            }
            Err(message) => {
                // A page of a search or collection holds the link to the
                // next: without it the listing ends. A catalog goes on
                // with its other documents.
                if self.kind != Kind::Catalog {
                    self.ended = true;
                }
                let after = match self.maker.items {
                    0 => String::new(),
                    n => format!(" (after {n} items)"),
                };
                self.read_ahead();
                Some(SourceError {
                    id: req.shown(),
                    message: format!("{message}{after}"),
                })
            }
        }
    }

    /// Starts reading the next document while the inputs of this one are
    /// taken (a link back to one read before is said after them).
    fn read_ahead(&mut self) {
        if self.ended {
            return;
        }
        match self.launch() {
            Some(Ok(ahead)) => self.ahead = Some(ahead),
            Some(Err(e)) => self.pending.push_back(Err(e)),
            None => {}
        }
    }

    /// A document asked for again: a `next` link back to a page already
    /// read ends the listing; a catalog's link to a document already read
    /// is a failed item, and the catalog goes on.
    fn loop_error(&mut self, req: &Request) -> SourceError {
        let shown = req.shown();
        if self.kind != Kind::Catalog {
            self.ended = true;
            return SourceError {
                id: shown.clone(),
                message: format!(
                    "{}: the `next` link of page {} leads back to {shown}, read before: a loop; \
                     stopped after {} items",
                    self.origin, self.pages, self.maker.items
                ),
            };
        }
        SourceError {
            id: shown.clone(),
            message: format!("{shown} is linked to twice in the catalog: read once"),
        }
    }

    /// The inputs and the links to follow of one document.
    fn take(
        &mut self,
        doc: Document,
        req: &Request,
        base: &Url,
        body: Option<Map<String, Value>>,
    ) -> Result<(), String> {
        let shown = req.shown();
        match doc.kind.as_deref() {
            Some("FeatureCollection") => {
                let next = link(&doc.links, "next").cloned();
                for (i, item) in doc.features.unwrap_or_default().into_iter().enumerate() {
                    let what = format!("{shown} item {i}");
                    self.maker.item(item, base, &what, false, &mut self.pending);
                }
                if let Some(next) = next {
                    let todo = next_request(&next, base, body)
                        .map_err(|m| format!("{shown}: its `next` link: {m}"))?;
                    self.todo.push(todo);
                }
                Ok(())
            }
            Some("Feature") => {
                let what = format!("{shown} item {}", doc.id.clone().unwrap_or_default());
                self.maker
                    .item(doc.into_item(), base, &what, false, &mut self.pending);
                Ok(())
            }
            Some("Catalog" | "Collection") if self.kind == Kind::Catalog => {
                self.links(&doc.links, base, &shown);
                Ok(())
            }
            other => Err(format!(
                "{shown}: not what a STAC {} gives (its type is {}){}",
                match self.kind {
                    Kind::Catalog => "catalog",
                    _ => "ItemCollection",
                },
                other.map_or("missing".to_owned(), |t| format!("{t:?}")),
                if self.kind == Kind::Search {
                    ": is this the API's /search URL?"
                } else {
                    ""
                }
            )),
        }
    }

    /// A catalog's `child` and `item` links, to read depth first, in the
    /// document's order: pushed last to first.
    fn links(&mut self, links: &[Link], base: &Url, shown: &str) {
        for l in links.iter().rev() {
            if !matches!(l.rel.as_deref(), Some("child" | "item")) {
                continue;
            }
            let Some(href) = &l.href else { continue };
            let url = base.join(href).map_err(|e| e.to_string());
            match url.and_then(|u| read::not_local_from_remote(u, base)) {
                Ok(url) => self.todo.push((Request::get(url), None)),
                Err(e) => self.pending.push_back(Err(SourceError {
                    id: redact(href),
                    message: format!("{shown}: link {:?}: {e}", redact(href)),
                })),
            }
        }
    }
}

/// The request a `next` link asks for: GET its href, or POST its body
/// (merged into the last body when it says `merge`), with its headers.
pub(super) fn next_request(
    next: &Link,
    base: &Url,
    last: Option<Map<String, Value>>,
) -> Result<Todo, String> {
    let href = next.href.as_deref().ok_or("no href")?;
    let url = base
        .join(href)
        .map_err(|e| format!("href {:?}: {e}", redact(href)))?;
    let url = read::not_local_from_remote(url, base)?;
    let headers = next
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            )
        })
        .collect();
    match next.method.as_deref().unwrap_or("GET") {
        "GET" => Ok((
            Request {
                url,
                body: None,
                headers,
            },
            None,
        )),
        "POST" => {
            let mut body = if next.merge {
                last.unwrap_or_default()
            } else {
                Map::new()
            };
            body.extend(next.body.clone().unwrap_or_default());
            Ok((
                Request {
                    url,
                    body: Some(Value::Object(body.clone()).to_string()),
                    headers,
                },
                Some(body),
            ))
        }
        other => Err(format!("method {other:?}: GET or POST")),
    }
}
