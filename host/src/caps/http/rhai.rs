//! `http::*` for workflow scripts, through the same adapter as a plugin's
//! request (checked against `[workflow.grants.http]`, credentials attached by
//! the host, journaled):
//!
//! - `http::send(#{endpoint, method, path, query, headers, body})` → `#{status,
//!   headers, text, json}`. `method` is `GET`, `POST`, `PUT`, `PATCH` or
//!   `DELETE` (any case; default `GET`); `query` and `headers` are maps of
//!   strings; `body` is a string or a blob (sent as is) or a map or array (sent
//!   as JSON, with `Content-Type: application/json` unless `headers` sets one).
//!   In the answer `headers` has lower-case names, `text` is the body as text
//!   and `json` the body parsed, or `()` when it is not JSON.
//! - `http::get(endpoint, path)`, `http::delete(endpoint, path)`,
//!   `http::post(endpoint, path, body)`, `http::put(...)`, `http::patch(...)`:
//!   the same with no query or headers.
//!
//! - `http::probe(url)`, `http::probe(url, timeout_ms)` → `#{status}`: one
//!   health probe of a guest (`GET url`, no credentials, no redirect
//!   followed, the body not read), allowed when the URL's host is the
//!   inventory address of a VM of the run and its port is in
//!   `[workflow.grants.http] guest_ports`; default timeout 5 s. A refused
//!   connection or a timeout throws `transient`.
//!
//! Any HTTP status is an answer (the workflow decides what a 4xx means); only
//! a refused or failed request throws `#{kind, message}`. Unknown keys in the
//! request are an error, so a typo does not silently drop a field.

use rhai::{Blob, Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script_glue::{Res, throw};
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::http::{Host, Method, Request, Response};
use crate::contract::bindings::cradle::host::types::Entry;

const FIELDS: [&str; 6] = ["endpoint", "method", "path", "query", "headers", "body"];

fn invalid(message: String) -> Box<rhai::EvalAltResult> {
    throw(CapError::invalid(message))
}

fn method(text: &str) -> Res<Method> {
    match text.to_ascii_uppercase().as_str() {
        "GET" => Ok(Method::Get),
        "POST" => Ok(Method::Post),
        "PUT" => Ok(Method::Put),
        "PATCH" => Ok(Method::Patch),
        "DELETE" => Ok(Method::Delete),
        other => Err(invalid(format!("http::send: unknown method `{other}` (GET, POST, PUT, PATCH, DELETE)"))),
    }
}

fn entries(req: &Map, key: &str) -> Res<Vec<Entry>> {
    let Some(value) = req.get(key).filter(|v| !v.is_unit()) else { return Ok(Vec::new()) };
    let map = value
        .read_lock::<Map>()
        .ok_or_else(|| invalid(format!("http::send: `{key}` must be a map of strings, got {}", value.type_name())))?;
    map.iter()
        .map(|(k, v)| {
            let value = if v.is_string() { v.to_string() } else { crate::workflow::values::to_json(v).to_string() };
            Ok(Entry { key: k.to_string(), value })
        })
        .collect()
}

/// The body as bytes, and whether it was made JSON here.
fn body(value: Option<&Dynamic>) -> Res<(Option<Vec<u8>>, bool)> {
    let Some(v) = value.filter(|v| !v.is_unit()) else { return Ok((None, false)) };
    if let Some(s) = v.read_lock::<ImmutableString>() {
        return Ok((Some(s.as_bytes().to_vec()), false));
    }
    if let Some(b) = v.read_lock::<Blob>() {
        return Ok((Some(b.clone()), false));
    }
    if v.is_map() || v.is_array() {
        let json = crate::workflow::values::to_json(v);
        return Ok((Some(json.to_string().into_bytes()), true));
    }
    Err(invalid(format!("http::send: `body` must be a string, blob, map or array, got {}", v.type_name())))
}

fn text_field(req: &Map, key: &str, default: Option<&str>) -> Res<String> {
    match (req.get(key), default) {
        (Some(v), _) if v.is_string() => Ok(v.to_string()),
        (None, Some(d)) => Ok(d.to_string()),
        (None, None) => Err(invalid(format!("http::send: missing field `{key}`"))),
        (Some(v), _) => Err(invalid(format!("http::send: `{key}` must be a string, got {}", v.type_name()))),
    }
}

/// A script's request map as the WIT request.
pub(crate) fn request(req: &Map) -> Res<Request> {
    if let Some(unknown) = req.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!("http::send: unknown field `{unknown}` (expected {})", FIELDS.join(", "))));
    }
    let (body, made_json) = body(req.get("body"))?;
    let mut headers = entries(req, "headers")?;
    if made_json && !headers.iter().any(|h| h.key.eq_ignore_ascii_case("content-type")) {
        headers.push(Entry { key: "Content-Type".into(), value: "application/json".into() });
    }
    Ok(Request {
        endpoint: text_field(req, "endpoint", None)?,
        method: method(&text_field(req, "method", Some("GET"))?)?,
        path: text_field(req, "path", None)?,
        query: entries(req, "query")?,
        headers,
        body,
    })
}

/// The WIT response as the script's map.
pub(crate) fn response(r: Response) -> Map {
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let json = serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| crate::workflow::values::from_json(&v).ok())
        .unwrap_or(Dynamic::UNIT);
    let mut headers = Map::new();
    for h in r.headers {
        headers.insert(h.key.to_ascii_lowercase().into(), h.value.into());
    }
    let mut m = Map::new();
    m.insert("status".into(), Dynamic::from_int(i64::from(r.status)));
    m.insert("headers".into(), headers.into());
    m.insert("text".into(), text.into());
    m.insert("json".into(), json);
    m
}

fn send(ctx: &NativeCallContext, req: &Map) -> Res<Map> {
    let req = request(req)?;
    Host::send(&mut caps(ctx)?, req).map(response).map_err(wit_throw)
}

/// A probe's time limit unless the script gives one.
const PROBE_TIMEOUT_MS: u64 = 5000;

fn probe(ctx: &NativeCallContext, url: &str, timeout_ms: u64) -> Res<Map> {
    let status = caps(ctx)?.probe_guest(url, timeout_ms).map_err(throw)?;
    let mut m = Map::new();
    m.insert("status".into(), Dynamic::from_int(i64::from(status)));
    Ok(m)
}

fn shortcut(endpoint: &str, method: &str, path: &str, body: Option<Dynamic>) -> Map {
    let mut m = Map::new();
    m.insert("endpoint".into(), endpoint.into());
    m.insert("method".into(), method.into());
    m.insert("path".into(), path.into());
    if let Some(b) = body {
        m.insert("body".into(), b);
    }
    m
}

/// The `http` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("send").set_into_module(&mut m, |ctx: NativeCallContext, req: Map| send(&ctx, &req));
    FuncRegistration::new("probe")
        .set_into_module(&mut m, |ctx: NativeCallContext, url: ImmutableString| probe(&ctx, &url, PROBE_TIMEOUT_MS));
    FuncRegistration::new("probe").set_into_module(
        &mut m,
        |ctx: NativeCallContext, url: ImmutableString, timeout_ms: i64| {
            probe(&ctx, &url, u64::try_from(timeout_ms).unwrap_or(0))
        },
    );
    for name in ["get", "delete"] {
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, endpoint: ImmutableString, path: ImmutableString| {
                send(&ctx, &shortcut(&endpoint, name, &path, None))
            },
        );
    }
    for name in ["post", "put", "patch"] {
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, endpoint: ImmutableString, path: ImmutableString, body: Dynamic| {
                send(&ctx, &shortcut(&endpoint, name, &path, Some(body)))
            },
        );
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, Dynamic)]) -> Map {
        pairs.iter().map(|(k, v)| ((*k).into(), v.clone())).collect()
    }

    #[test]
    fn a_map_body_is_sent_as_json_and_query_and_headers_are_strings() {
        let body: Map = map(&[("status", "active".into()), ("id", Dynamic::from_int(3))]);
        let query: Map = map(&[("limit", Dynamic::from_int(50)), ("name", "web-1".into())]);
        let req = request(&map(&[
            ("endpoint", "netbox".into()),
            ("method", "patch".into()),
            ("path", "/api/virtualization/virtual-machines/3/".into()),
            ("query", query.into()),
            ("body", body.into()),
        ]))
        .expect("request");
        assert!(matches!(req.method, Method::Patch));
        let sent: serde_json::Value = serde_json::from_slice(req.body.as_deref().expect("body")).expect("json");
        assert_eq!(sent, serde_json::json!({ "status": "active", "id": 3 }));
        assert!(req.headers.iter().any(|h| h.key == "Content-Type" && h.value == "application/json"));
        let q: Vec<(&str, &str)> = req.query.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
        assert_eq!(q, vec![("limit", "50"), ("name", "web-1")]);
    }

    #[test]
    fn a_typo_a_bad_method_or_a_missing_path_is_an_error_naming_it() {
        let base = |extra: (&str, Dynamic)| map(&[("endpoint", "netbox".into()), ("path", "/x".into()), extra]);
        let err = |m: Map| request(&m).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(base(("bdy", "x".into()))).contains("unknown field `bdy`"));
        assert!(err(base(("method", "TRACE".into()))).contains("unknown method `TRACE`"));
        assert!(err(map(&[("endpoint", "netbox".into())])).contains("missing field `path`"));
        assert!(err(base(("body", Dynamic::from_int(1)))).contains("`body` must be"));
    }

    #[test]
    fn an_answer_gives_status_lower_case_headers_text_and_parsed_json() {
        let r = response(Response {
            status: 201,
            headers: vec![Entry { key: "API-Version".into(), value: "4.7".into() }],
            body: br#"{"id": 5, "status": {"value": "staged"}}"#.to_vec(),
        });
        assert_eq!(r["status"].as_int().expect("int"), 201);
        let headers = r["headers"].read_lock::<Map>().expect("map").clone();
        assert_eq!(headers["api-version"].to_string(), "4.7");
        let json = r["json"].read_lock::<Map>().expect("json").clone();
        assert_eq!(json["id"].as_int().expect("id"), 5);
        let plain = response(Response { status: 200, headers: vec![], body: b"pong".to_vec() });
        assert!(plain["json"].is_unit());
        assert_eq!(plain["text"].to_string(), "pong");
    }
}
