//! `disk_image::*` for workflow scripts: the script face of the image service
//! (not `image`, so it never shadows a workflow that imports `lib/image` as `image`).
//! A source is a map: `#{path, size?, sha256?, transfer?, storage?, dir?}`
//! (a control-node file; `transfer` `auto` (default), `api` or `ssh`;
//! `storage` the `import` storage of an API upload, default `local`; `dir`
//! the node directory of an SSH upload, default [`super::DEFAULT_NODE_DIR`])
//! or `#{volume}` (already on Proxmox storage, e.g. `local:import/haos.qcow2`).
//!
//! - `disk_image::check(vm, source)` → `#{kind: "file", path, size, name,
//!   sha256}` or `#{kind: "volume", volid}`: the image exists (the volume on
//!   `vm.node`), with the size and the SHA-256 the source gives (the file is
//!   hashed only then; `sha256` is `()` otherwise); changes nothing.
//! - `disk_image::stage(vm, source)` → `#{import_from, via, uploaded, bytes,
//!   sha256}`: the source a disk is imported from, on `vm.node` (a volume is
//!   its own source: `via` `volume`).
//!
//! - `disk_image::check_iso(vm, iso)`, `disk_image::stage_iso(vm, iso)` (an
//!   ISO: `#{volume}` or `#{path, storage?}`, see [`super::media`]) and
//!   `disk_image::check_answer(vm, #{path, vars})` renders the answer file
//!   template without uploading anything (before any side effect).
//!   `disk_image::answer_iso(vm, #{path, vars, storage?})` → the volume id of
//!   the answer-file ISO built from the template at `path`.
//!
//! Failures throw `#{kind, message}` naming the VM, the path or volume and
//! the fix.

use std::collections::BTreeMap;

use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::media::{IsoSource, answer_file, answer_iso, check_iso, stage_iso};
use super::{ImageSource, StageOptions, Transfer, check_file, check_image, stage};
use crate::caps::creation::script_args::str_of;
use crate::caps::script_glue::{Res, throw, to_map};
use crate::caps::script_run::{caps, wit_throw, with_run};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::proxmox::Host as _;

fn invalid(msg: String) -> Box<rhai::EvalAltResult> {
    throw(CapError::invalid(msg))
}

fn opt_str(map: &Map, key: &str, what: &str) -> Res<Option<String>> {
    match map.get(key) {
        None => Ok(None),
        Some(v) if v.is_unit() => Ok(None),
        Some(v) => {
            v.clone().into_string().map(Some).map_err(|t| invalid(format!("{what}: `{key}` must be a string, got {t}")))
        }
    }
}

/// The source map as a typed [`ImageSource`], plus how to stage it.
fn source(map: &Map, what: &str) -> Res<(ImageSource, StageOptions)> {
    let mut opts = StageOptions::default();
    if let Some(dir) = opt_str(map, "dir", what)? {
        opts.dir = dir;
    }
    if let Some(storage) = opt_str(map, "storage", what)? {
        opts.storage = storage;
    }
    if let Some(t) = opt_str(map, "transfer", what)? {
        opts.transfer = Transfer::parse(&t)
            .ok_or_else(|| invalid(format!("{what}: transfer must be auto, api or ssh, not `{t}`")))?;
    }
    let dir = opts;
    if let Some(volid) = opt_str(map, "volume", what)? {
        return Ok((ImageSource::Volume(volid), dir));
    }
    let Some(path) = opt_str(map, "path", what)? else {
        return Err(invalid(format!("{what}: the image source needs `path` (a file on the control node) or `volume`")));
    };
    let size = match map.get("size") {
        None => None,
        Some(v) if v.is_unit() => None,
        Some(v) => Some(
            v.as_int()
                .ok()
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| invalid(format!("{what}: `size` must be a whole number of bytes")))?,
        ),
    };
    Ok((ImageSource::File { path, size, sha256: opt_str(map, "sha256", what)? }, dir))
}

/// The VM's name and node from the script's `vm`.
fn vm_of(vm: &Map) -> Res<(String, String)> {
    Ok((str_of(vm, "name", "image")?, str_of(vm, "node", "image")?))
}

/// Whether `volid` is on its storage on `node` (listed with its content type).
fn check_volume(ctx: &NativeCallContext, node: &str, volid: &str, what: &str) -> Res<Map> {
    let Some((storage, rest)) = volid.split_once(':') else {
        return Err(invalid(format!("{what}: volume `{volid}` is not STORAGE:CONTENT/FILE")));
    };
    let content = rest.split_once('/').map(|(c, _)| if c == "template" { "vztmpl" } else { c }).unwrap_or("images");
    let content = if rest.starts_with("template/iso/") { "iso" } else { content };
    let listed = caps(ctx)?
        .storage_content(node.to_string(), storage.to_string(), Some(content.to_string()))
        .map_err(wit_throw)?;
    if !listed.iter().any(|v| v.volid == volid) {
        return Err(throw(CapError::new(
            crate::contract::ErrorKind::NotFound,
            format!(
                "{what}: volume {volid} is not on storage {storage} of node {node}: upload it there (pvesm, the web \
                 UI) or name a file on the control node instead; nothing was changed"
            ),
        )));
    }
    let mut m = Map::new();
    m.insert("kind".into(), "volume".into());
    m.insert("volid".into(), volid.into());
    Ok(m)
}

/// An ISO source map: `#{volume}` or `#{path, storage?}` (default storage `local`).
fn iso_source(map: &Map, what: &str) -> Res<IsoSource> {
    if let Some(volid) = opt_str(map, "volume", what)? {
        return Ok(IsoSource::Volume(volid));
    }
    let Some(path) = opt_str(map, "path", what)? else {
        return Err(invalid(format!(
            "{what}: an ISO needs `volume` (on Proxmox storage) or `path` (on the control node)"
        )));
    };
    Ok(IsoSource::File { path, storage: opt_str(map, "storage", what)?.unwrap_or_else(|| "local".into()) })
}

/// `#{path, vars, storage?}`: the template's path, the storage (default
/// `local`) and the placeholder values.
fn answer_spec(spec: &Map, what: &str) -> Res<(String, String, BTreeMap<String, String>)> {
    let path = opt_str(spec, "path", what)?
        .ok_or_else(|| invalid(format!("{what}: `path` (the answer file template) is missing")))?;
    let storage = opt_str(spec, "storage", what)?.unwrap_or_else(|| "local".into());
    let mut vars = BTreeMap::new();
    if let Some(v) = spec.get("vars").and_then(|v| v.read_lock::<Map>().map(|m| m.clone())) {
        for (k, val) in v {
            vars.insert(k.to_string(), val.to_string());
        }
    }
    Ok((path, storage, vars))
}

/// The `disk_image` module.
pub fn module() -> Module {
    let mut m = Module::new();
    // `disk_image::check_iso(vm, #{volume} | #{path, storage})`: the ISO exists; changes nothing.
    FuncRegistration::new("check_iso").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: Map, src: Map| -> Res<()> {
            let (name, node) = vm_of(&vm)?;
            let what = format!("{name}: ISO");
            let source = iso_source(&src, &what)?;
            check_iso(&mut caps(&ctx)?, &node, &source, &what).map_err(throw)
        },
    );
    // `disk_image::stage_iso(vm, source)` → the ISO's volume id on `vm.node`'s storage.
    FuncRegistration::new("stage_iso").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: Map, src: Map| -> Res<ImmutableString> {
            let (name, node) = vm_of(&vm)?;
            let what = format!("{name}: ISO");
            let source = iso_source(&src, &what)?;
            stage_iso(&mut caps(&ctx)?, &node, &source, &what).map(Into::into).map_err(throw)
        },
    );
    // `disk_image::check_answer(vm, #{path, vars})`: the template exists and
    // renders (every placeholder has a value); changes nothing.
    FuncRegistration::new("check_answer").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: Map, spec: Map| -> Res<()> {
            let (name, _) = vm_of(&vm)?;
            let what = format!("{name}: answer file");
            let (path, _, vars) = answer_spec(&spec, &what)?;
            let project = with_run(&ctx, |d| d.services.project_dir.clone())?;
            answer_file(&project, &path, &vars, &what).map(|_| ()).map_err(throw)
        },
    );
    // `disk_image::answer_iso(vm, #{path, vars, storage?})` → the answer ISO's volume id.
    FuncRegistration::new("answer_iso").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: Map, spec: Map| -> Res<ImmutableString> {
            let (name, node) = vm_of(&vm)?;
            let what = format!("{name}: answer file");
            let (path, storage, vars) = answer_spec(&spec, &what)?;
            answer_iso(&mut caps(&ctx)?, &node, &storage, &name, &path, &vars, &what).map(Into::into).map_err(throw)
        },
    );
    FuncRegistration::new("check").set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, src: Map| -> Res<Map> {
        let (name, node) = vm_of(&vm)?;
        let what = format!("{name}: image");
        match source(&src, &what)?.0 {
            ImageSource::Volume(volid) => check_volume(&ctx, &node, &volid, &what),
            ImageSource::File { path, size, sha256 } => {
                let project = caps(&ctx)?.services.project_dir.clone();
                let (f, digest) = check_image(&project, &path, size, sha256.as_deref(), &what).map_err(throw)?;
                let mut out = Map::new();
                out.insert("kind".into(), "file".into());
                out.insert("path".into(), f.path.display().to_string().into());
                out.insert("size".into(), Dynamic::from_int(i64::try_from(f.size).unwrap_or(i64::MAX)));
                out.insert("name".into(), f.name.into());
                out.insert("sha256".into(), digest.map_or(Dynamic::UNIT, Dynamic::from));
                Ok(out)
            }
        }
    });
    FuncRegistration::new("stage").set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, src: Map| -> Res<Map> {
        let (name, node) = vm_of(&vm)?;
        let what = format!("{name}: image");
        let (source, dir) = source(&src, &what)?;
        match source {
            ImageSource::Volume(volid) => {
                check_volume(&ctx, &node, &volid, &what)?;
                let mut out = Map::new();
                out.insert("import_from".into(), volid.into());
                out.insert("via".into(), "volume".into());
                out.insert("uploaded".into(), false.into());
                Ok(out)
            }
            ImageSource::File { path, size, sha256 } => {
                let mut c = caps(&ctx)?;
                let f = check_file(&c.services.project_dir.clone(), &path, size, &what).map_err(throw)?;
                let staged = stage(&mut c, &node, &f, sha256.as_deref(), &dir, &what).map_err(throw)?;
                to_map(&staged)
            }
        }
    });
    m
}
