//! A tiny HTTP/1.1 server on 127.0.0.1 that answers canned responses in order and
//! records every request, for driving the client's retry and encoding behaviour.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub(crate) enum Canned {
    /// Answer with this status, reason phrase and body.
    Reply(u16, String, String),
    /// Answer 500 with a message echoing the request's Authorization header.
    EchoAuthorization,
    /// Close the connection without answering (after reading the request).
    Drop,
}

impl Canned {
    /// A `{"data": ...}` 200.
    pub(crate) fn data(data: serde_json::Value) -> Canned {
        Canned::Reply(200, "OK".into(), serde_json::json!({ "data": data }).to_string())
    }

    /// A PVE error answer: reason phrase = first line of the message.
    pub(crate) fn error(status: u16, message: &str) -> Canned {
        let reason = message.lines().next().unwrap_or("").to_string();
        Canned::Reply(
            status,
            reason,
            serde_json::json!({ "data": null, "message": format!("{message}\n") }).to_string(),
        )
    }
}

/// One recorded request.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// `POST /api2/json/... HTTP/1.1`.
    pub line: String,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// The server: its address and what it has seen. The last canned response repeats.
pub(crate) struct CannedServer {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Recorded>>>,
}

impl CannedServer {
    pub(crate) async fn start(responses: Vec<Canned>) -> CannedServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_server = seen.clone();
        tokio::spawn(async move {
            let mut index = 0usize;
            while let Ok((stream, _)) = listener.accept().await {
                let canned = responses.get(index).or(responses.last()).cloned().unwrap_or(Canned::Drop);
                index += 1;
                // One connection at a time keeps the order of canned answers exact.
                serve(stream, canned, &seen_by_server).await;
            }
        });
        CannedServer { addr, seen }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

async fn serve(mut stream: TcpStream, canned: Canned, seen: &Mutex<Vec<Recorded>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let recorded = Recorded { line, headers, body: String::from_utf8_lossy(&body).to_string() };
    let auth = recorded.header("authorization").unwrap_or("").to_string();
    seen.lock().expect("not poisoned").push(recorded);
    let (status, reason, body) = match canned {
        Canned::Reply(s, r, b) => (s, r, b),
        Canned::EchoAuthorization => {
            let message = format!("bad header {auth}\n");
            (500, format!("bad header {auth}"), serde_json::json!({"data": null, "message": message}).to_string())
        }
        Canned::Drop => return,
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
