//! A web identity's STS endpoint on loopback (EKS's IAM roles for service
//! accounts): `AssumeRoleWithWebIdentity` hands out session credentials of
//! [`Credentials`] that expire, for the web identity token the
//! `AWS_WEB_IDENTITY_TOKEN_FILE` holds. `object_store` asks STS over
//! https only, so the endpoint serves TLS with a certificate for
//! 127.0.0.1 from a certificate authority made at start; a client trusts
//! it through `SSL_CERT_FILE` (the authority's PEM, [`StsServer::ca_pem`]).

use std::net::SocketAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::credentials::{read_request, respond, Credentials, Request};

/// An STS endpoint on loopback. Stops when dropped.
#[derive(Debug)]
pub struct StsServer {
    addr: SocketAddr,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl StsServer {
    /// Serves `credentials` on the current tokio runtime.
    pub async fn start(credentials: Arc<Credentials>) -> std::io::Result<Self> {
        let (ca_pem, tls) = tls().map_err(std::io::Error::other)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, credentials) = (acceptor.clone(), Arc::clone(&credentials));
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut buf = Vec::new();
                    while let Some(request) = read_request(&mut stream, &mut buf).await {
                        let (status, body) = answer(&credentials, &request);
                        if !respond(&mut stream, status, "text/xml", &body).await {
                            return;
                        }
                    }
                });
            }
        });
        Ok(StsServer { addr, ca_pem, task })
    }

    /// `AWS_ENDPOINT_URL_STS`.
    pub fn endpoint(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The certificate authority of the endpoint's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

impl Drop for StsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An authority (its PEM) and a server configuration whose certificate
/// for 127.0.0.1 it signed.
fn tls() -> Result<(String, rustls::ServerConfig), Box<dyn std::error::Error + Send + Sync>> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)?;
    Ok((ca.pem(), config))
}

/// STS's answer to one request: `AssumeRoleWithWebIdentity` with the
/// expected token gets new credentials, anything else an error.
fn answer(c: &Credentials, r: &Request) -> (&'static str, String) {
    let query = r.target.split_once('?').map_or("", |(_, q)| q);
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let assume = r.method == "POST" && param("Action") == Some("AssumeRoleWithWebIdentity");
    if assume && param("WebIdentityToken") == Some(c.authorization.as_str()) {
        ("200 OK", c.issue_xml())
    } else {
        let code = if assume {
            "InvalidIdentityToken"
        } else {
            "InvalidAction"
        };
        let xml = format!("<ErrorResponse><Error><Code>{code}</Code></Error></ErrorResponse>");
        ("400 Bad Request", xml)
    }
}
