//! The terraform capability with the real `terraform` binary (1.11.4 on
//! these machines), on modules of terraform's built-in `terraform_data`
//! resource, which need no provider: the subcommands, file modes, plan
//! ownership across runs, failure logs, the credentials' path into terraform
//! (its environment, never its command line or a file) and redaction. The
//! Proxmox providers are exercised end to end in tests/e2e.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::approval::ApplyRule;
use super::module_dir::ModuleDir;
use super::plans::Plans;
use super::{Credentials, Terraform, TerraformConfig, TlsTrust};
use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::RunScope;
use crate::contract::bindings::cradle::host::terraform::{Host, ModuleFile};
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::secrets::Secret;

/// The token every test hands terraform: it must never show up anywhere but
/// in terraform's environment.
const CANARY: &str = "root@pam!cradle=canary-7d1e0c9a-tf";
const CANARY_SECRET: &str = "canary-7d1e0c9a-tf";

const LIMIT: Duration = Duration::from_secs(120);

/// Where a denial would name the grant.
const ORIGIN: &str = "plugins.t.grants";

/// `apply`'s rule for the test modules' one `terraform_data.vm`.
fn rule(destructive: bool) -> ApplyRule {
    ApplyRule::for_resource("terraform_data", "vm", "terraform.io/builtin/terraform", destructive)
}

fn require_terraform() {
    let found = std::process::Command::new("terraform").arg("version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "these tests run the real `terraform` (>= 1.5) and it is not on PATH: install Terraform 1.11.4"
    );
}

fn provider(state: &Path, cfg: TerraformConfig) -> Terraform {
    let creds = Credentials {
        endpoint: "https://127.0.0.1:9".into(),
        token: Secret::new(CANARY.into()),
        tls: TlsTrust::CaFile(state.join("ca.pem")),
    };
    Terraform::new(&cfg, creds, "lab", state.join("plugin-cache"))
}

/// A module of one `terraform_data` whose input is `input`. With `echo`, an
/// output prints the token's secret, which terraform's printed lines must not
/// show. (No provisioner: the approval in `apply` refuses one.)
fn module(input: &str, echo: bool) -> String {
    let mut m = serde_json::json!({ "resource": { "terraform_data": { "vm": { "input": input } } } });
    if echo {
        m["output"] = serde_json::json!({ "echo": { "value": CANARY_SECRET } });
    }
    m.to_string()
}

/// A terraform binary that records its command lines and environment under
/// `spy`, then runs the real terraform.
fn spying_binary(dir: &Path, spy: &Path) -> PathBuf {
    let real = std::process::Command::new("sh").args(["-c", "command -v terraform"]).output().expect("which");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let script = dir.join("terraform-spy");
    let text = format!("#!/bin/sh\necho \"$@\" >> {0}/cmdline\nenv > {0}/environ\nexec {real} \"$@\"\n", spy.display());
    std::fs::write(&script, text).expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    script
}

fn lines() -> (Arc<Mutex<Vec<String>>>, impl Fn(&str) + Sync) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (seen, move |l: &str| s.lock().expect("lines").push(l.to_string()))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("meta").permissions().mode() & 0o777
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let p = e.path();
        if e.file_type().expect("type").is_dir() {
            out.extend(files_under(&p));
        } else if e.file_type().expect("type").is_file() {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_saved_plan_is_applied_exactly_and_the_module_stays_owner_only() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, spy) = (tmp.path().join("modules"), tmp.path().join("spy"));
    std::fs::create_dir_all(&spy).expect("spy");
    let tf = provider(tmp.path(), TerraformConfig::default());
    let m = ModuleDir::new(&root, "web-1");
    m.write(&[("main.tf.json".into(), module("v1", true))]).expect("write");
    let (seen, sink) = lines();
    tf.init(&m, LIMIT, &sink).await.expect("init");
    let plans = Plans::default();
    let (id, changes) = tf.plan(&m, &plans, false, LIMIT, &sink).await.expect("plan");
    assert!(changes, "a new resource is a change");
    let json = tf.show_plan(&m, &plans, &id, LIMIT).await.expect("show");
    let plan: serde_json::Value = serde_json::from_str(&json).expect("plan JSON");
    assert_eq!(plan["resource_changes"][0]["change"]["actions"], serde_json::json!(["create"]));
    tf.apply(&m, &plans, &id, &rule(false), ORIGIN, LIMIT, &sink).await.expect("apply");
    plans.discard(m.path(), &id).expect("discard");

    let state = tf.show_state(&m, LIMIT).await.expect("state").expect("a state exists");
    assert!(state.contains("terraform_data.vm"), "{state}");
    // The rerun: no changes.
    let (again, changes) = tf.plan(&m, &plans, false, LIMIT, &sink).await.expect("plan again");
    assert!(!changes, "the same module plans no change");
    plans.discard(m.path(), &again).expect("discard");

    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(m.path()), 0o700);
    for f in files_under(m.path()) {
        let want = if mode(&f) & 0o100 != 0 { 0o700 } else { 0o600 };
        assert_eq!(mode(&f), want, "{}", f.display());
    }
    assert_eq!(mode(&m.path().join("terraform.tfstate")), 0o600);
    // Terraform's output passed through the redactor (the output's value is the secret).
    let seen = seen.lock().expect("lines").join("\n");
    assert!(seen.contains("Apply complete!"), "{seen}");
    assert!(!seen.contains(CANARY_SECRET) && seen.contains("[redacted]"), "{seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_reaches_terraform_in_its_environment_never_on_its_command_line() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, spy) = (tmp.path().join("modules"), tmp.path().join("spy"));
    std::fs::create_dir_all(&spy).expect("spy");
    let binary = Some(spying_binary(tmp.path(), &spy));
    let tf = provider(tmp.path(), TerraformConfig { binary, ..TerraformConfig::default() });
    let m = ModuleDir::new(&root, "web-1");
    m.write(&[("main.tf.json".into(), module("v1", false))]).expect("write");
    let plans = Plans::default();
    let (id, _) = tf.plan(&m, &plans, false, LIMIT, &|_| {}).await.expect("plan");
    let plan_file = files_under(m.path()).into_iter().find(|f| f.to_string_lossy().ends_with(".tfplan"));
    tf.apply(&m, &plans, &id, &rule(false), ORIGIN, LIMIT, &|_| {}).await.expect("apply");
    // No file terraform or cradle wrote holds it: module, plan, state, backups, lock file.
    let mut written = files_under(&root);
    written.extend(plan_file);
    for f in written {
        let text = String::from_utf8_lossy(&std::fs::read(&f).expect("read")).into_owned();
        assert!(!text.contains(CANARY_SECRET), "{} holds the token", f.display());
    }
    let cmdline = std::fs::read_to_string(spy.join("cmdline")).expect("the wrapper saw terraform");
    assert!(cmdline.contains("apply") && cmdline.contains(".tfplan"), "{cmdline}");
    assert!(!cmdline.contains(CANARY_SECRET) && !cmdline.contains("-var"), "{cmdline}");
    let environ = std::fs::read_to_string(spy.join("environ")).expect("environ");
    assert!(environ.lines().any(|l| l == format!("PM_API_TOKEN_SECRET={CANARY_SECRET}")), "telmate's variable");
    assert!(environ.lines().any(|l| l == format!("PROXMOX_VE_API_TOKEN={CANARY}")), "bpg's variable");
    assert!(environ.lines().any(|l| l == "PM_API_URL=https://127.0.0.1:9/api2/json"));
    // Nothing of cradle's own environment but what it passes on: the
    // provider's credentials, terraform's own settings, PATH/HOME/TMPDIR and
    // the proxies (PWD, SHLVL and `_` are the spying shell's own).
    let allowed = [
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "TF_IN_AUTOMATION",
        "TF_INPUT",
        "CHECKPOINT_DISABLE",
        "TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE",
        "TF_CLI_CONFIG_FILE",
        "TF_PLUGIN_CACHE_DIR",
        "PM_API_URL",
        "PM_API_TOKEN_ID",
        "PM_API_TOKEN_SECRET",
        "PM_TLS_INSECURE",
        "PROXMOX_VE_ENDPOINT",
        "PROXMOX_VE_API_TOKEN",
        "PROXMOX_VE_INSECURE",
        "SSL_CERT_FILE",
        "PWD",
        "SHLVL",
        "_",
    ];
    for line in environ.lines() {
        let key = line.split_once('=').map_or(line, |(k, _)| k);
        assert!(allowed.contains(&key), "terraform's environment holds {key}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_plan_leaves_an_owner_only_failure_log_and_says_what_to_inspect() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let tf = provider(tmp.path(), TerraformConfig::default());
    let m = ModuleDir::new(&tmp.path().join("modules"), "web-1");
    let broken =
        serde_json::json!({ "resource": { "terraform_data": { "vm": { "input": "${file(\"/nonexistent\")}" } } } });
    m.write(&[("main.tf.json".into(), broken.to_string())]).expect("write");
    let plans = Plans::default();
    let err = tf.plan(&m, &plans, false, LIMIT, &|_| {}).await.expect_err("plan fails");
    let log = m.path().join(super::module_dir::FAILURE_LOG);
    assert!(
        err.message.contains("terraform plan failed") && err.message.contains("terraform-failure.log"),
        "{}",
        err.message
    );
    assert!(err.message.contains("may hold secrets") && err.message.contains("before retrying"), "{}", err.message);
    assert_eq!(mode(&log), 0o600);
    assert!(std::fs::read_to_string(&log).expect("log").contains("nonexistent"));
    let leftovers: Vec<_> =
        files_under(m.path()).into_iter().filter(|f| f.to_string_lossy().ends_with(".tfplan")).collect();
    assert!(leftovers.is_empty(), "a failed attempt leaves no plan: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terraform_older_than_1_5_is_refused_naming_its_version() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fake = tmp.path().join("terraform");
    std::fs::write(&fake, "#!/bin/sh\necho '{\"terraform_version\":\"1.4.6\"}'\n").expect("write");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let tf = provider(tmp.path(), TerraformConfig { binary: Some(fake), ..TerraformConfig::default() });
    let err = tf.settings().await.expect_err("too old");
    assert!(err.message.contains("1.4.6") && err.message.contains(">= 1.5"), "{}", err.message);
    let missing =
        provider(tmp.path(), TerraformConfig { binary: Some(tmp.path().join("nope")), ..TerraformConfig::default() });
    let err = missing.settings().await.expect_err("missing");
    assert!(err.message.contains("[terraform] binary"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_pinned_only_by_fingerprint_is_refused_before_terraform_runs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let creds = Credentials {
        endpoint: "https://pve:8006".into(),
        token: Secret::new(CANARY.into()),
        tls: TlsTrust::FingerprintOnly,
    };
    let tf = Terraform::new(&TerraformConfig::default(), creds, "lab", tmp.path().join("cache"));
    let m = ModuleDir::new(tmp.path(), "web-1");
    m.ensure().expect("dir");
    let err = tf.init(&m, LIMIT, &|_| {}).await.expect_err("refused");
    assert!(err.message.contains("clusters.lab.ca_file"), "{}", err.message);
}

// --- through the WIT adapter: grants, runs ---

fn ctx(root: &Path, rt: &tokio::runtime::Runtime, tf: Arc<Terraform>, run: &str) -> CapCtx {
    let grants: Grants = toml::from_str(&format!("[terraform]\nmodule_root = \"{}\"", root.display())).expect("grants");
    let services_dir = root.parent().expect("parent").join("services");
    let services = Services { terraform: Some(tf), ..Services::for_tests(&services_dir, rt) };
    CapCtx::for_tests(grants, RunScope::default(), services, run)
}

fn wit_kind(e: &WitError) -> &'static str {
    match e {
        WitError::Denied(_) => "denied",
        WitError::NotFound(_) => "not-found",
        WitError::Invalid(_) => "invalid",
        WitError::Conflict(_) => "conflict",
        WitError::Transient(_) => "transient",
        WitError::Failed(_) => "failed",
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_can_never_use_or_discard_another_runs_plan() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("modules");
    let tf = provider(tmp.path(), TerraformConfig::default());
    let spy = tmp.path().join("spy");
    std::fs::create_dir_all(&spy).expect("spy");
    let m = ModuleDir::new(&root, "web-1");
    m.write(&[("main.tf.json".into(), module("v1", false))]).expect("write");
    let (one, two) = (Plans::default(), Plans::default());
    let (id, _) = tf.plan(&m, &one, false, LIMIT, &|_| {}).await.expect("plan");
    for e in [
        tf.apply(&m, &two, &id, &rule(false), ORIGIN, LIMIT, &|_| {}).await.expect_err("apply"),
        tf.show_plan(&m, &two, &id, LIMIT).await.expect_err("show"),
        two.discard(m.path(), &id).expect_err("discard"),
    ] {
        assert_eq!(e.kind, crate::contract::ErrorKind::NotFound, "{e:?}");
    }
    let file = files_under(m.path()).into_iter().find(|f| f.to_string_lossy().ends_with(".tfplan"));
    assert!(file.is_some(), "run one's plan is still there");
    tf.apply(&m, &one, &id, &rule(false), ORIGIN, LIMIT, &|_| {}).await.expect("its own run applies it");
    one.discard(m.path(), &id).expect("discard");
}

#[test]
fn module_names_outside_the_root_are_denied_and_nothing_is_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let root = tmp.path().join("modules");
    let tf = Arc::new(provider(tmp.path(), TerraformConfig::default()));
    let mut c = ctx(&root, &rt, tf, "run");
    for bad in ["../escape", "a/b", ""] {
        let file = ModuleFile { name: "main.tf.json".into(), content: "{}".into() };
        let e = c.write_module(bad.into(), vec![file]).expect_err("denied");
        assert_eq!(wit_kind(&e), "denied", "{bad}: {e:?}");
    }
    assert!(!tmp.path().join("escape").exists() && !root.exists());
    let e = c
        .write_module("web-1".into(), vec![ModuleFile { name: "x.tf".into(), content: "{}".into() }])
        .expect_err("not .tf.json");
    assert_eq!(wit_kind(&e), "invalid");
}

// --- the host's own approval in `apply` (issue 32, section 2) ---

/// Whether the module's state still holds `terraform_data.vm`.
async fn still_in_state(tf: &Terraform, m: &ModuleDir) -> bool {
    tf.show_state(m, LIMIT).await.expect("state").is_some_and(|s| s.contains("terraform_data.vm"))
}

/// Module `web-1` under `dir` with its `terraform_data.vm` created through a plan
/// and the host's approved apply (asserted), for the tests of what may follow.
async fn created(dir: &Path) -> (Terraform, ModuleDir, Plans) {
    let tf = provider(dir, TerraformConfig::default());
    let m = ModuleDir::new(&dir.join("modules"), "web-1");
    m.write(&[("main.tf.json".into(), module("v1", false))]).expect("write");
    let plans = Plans::default();
    let (id, _) = tf.plan(&m, &plans, false, LIMIT, &|_| {}).await.expect("plan");
    let approval = tf.apply(&m, &plans, &id, &rule(false), ORIGIN, LIMIT, &|_| {}).await.expect("create");
    assert_eq!(approval.summary[0], "create terraform_data.vm");
    (tf, m, plans)
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_a_plan_that_deletes_the_resource_whatever_the_plugin_checked() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let (tf, m, plans) = created(tmp.path()).await;
    // The resource removed from the module: an ordinary plan deletes it.
    m.write(&[("main.tf.json".into(), "{}".into())]).expect("write");
    for destructive in [false, true] {
        let (id, changes) = tf.plan(&m, &plans, false, LIMIT, &|_| {}).await.expect("plan");
        assert!(changes);
        let err = tf.apply(&m, &plans, &id, &rule(destructive), ORIGIN, LIMIT, &|_| {}).await.expect_err("refused");
        assert_eq!(err.kind, crate::contract::ErrorKind::Denied, "{err:?}");
        assert!(err.message.contains("module `web-1` is refused, nothing was applied"), "{}", err.message);
        assert!(still_in_state(&tf, &m).await, "nothing was destroyed");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destroy_plan_applies_only_with_the_destructive_grant() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let (tf, m, plans) = created(tmp.path()).await;
    let (id, _) = tf.plan(&m, &plans, true, LIMIT, &|_| {}).await.expect("destroy plan");
    let err = tf.apply(&m, &plans, &id, &rule(false), ORIGIN, LIMIT, &|_| {}).await.expect_err("refused");
    assert!(err.message.contains("plugins.t.grants.terraform.destructive is not true"), "{}", err.message);
    assert!(still_in_state(&tf, &m).await, "nothing was destroyed");
    let approval = tf.apply(&m, &plans, &id, &rule(true), ORIGIN, LIMIT, &|_| {}).await.expect("destroyed");
    assert_eq!(approval.summary[0], "delete terraform_data.vm");
    assert!(!still_in_state(&tf, &m).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_a_plan_of_any_other_resource_and_creates_nothing() {
    require_terraform();
    let tmp = tempfile::tempdir().expect("tmp");
    let tf = provider(tmp.path(), TerraformConfig::default());
    let m = ModuleDir::new(&tmp.path().join("modules"), "web-1");
    let other = serde_json::json!({ "resource": { "terraform_data": { "evil": { "input": "x" } } } });
    m.write(&[("main.tf.json".into(), other.to_string())]).expect("write");
    let plans = Plans::default();
    let (id, _) = tf.plan(&m, &plans, false, LIMIT, &|_| {}).await.expect("plan");
    let err = tf.apply(&m, &plans, &id, &rule(true), ORIGIN, LIMIT, &|_| {}).await.expect_err("refused");
    assert!(
        err.message.contains("terraform_data.evil") && err.message.contains("nothing was applied"),
        "{}",
        err.message
    );
    assert!(
        !m.has_state().expect("state")
            || tf.show_state(&m, LIMIT).await.expect("show").is_none_or(|s| !s.contains("evil"))
    );
}
