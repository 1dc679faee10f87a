//! Reading inventories: formats, groups, precedence, patterns.

use std::path::Path;

use serde_json::json;

use super::*;

fn ini(text: &str) -> Inventory {
    Inventory::from_ini(text, Path::new("hosts.ini")).expect("valid INI")
}

fn names(hosts: &[HostName]) -> Vec<&str> {
    hosts.iter().map(HostName::as_str).collect()
}

fn homelab(file: &str) -> Inventory {
    Inventory::load(&fixtures().join("homelab").join(file)).expect("fixture loads")
}

const HOMELAB_ORDER: [&str; 10] =
    ["pve1", "pve2", "pve3", "test-0", "test-1", "test-2", "test-3", "web-1", "web-2", "db-1"];

#[test]
fn ini_and_yaml_fixtures_load_the_same_inventory() {
    let a = homelab("hosts.ini");
    let b = homelab("hosts.yml");
    assert_eq!(names(&a.hosts()), HOMELAB_ORDER);
    assert_eq!(names(&b.hosts()), HOMELAB_ORDER);
    for h in HOMELAB_ORDER {
        assert_eq!(a.host_vars(h).expect("vars"), b.host_vars(h).expect("vars"), "{h}");
        assert_eq!(a.host_groups(h).expect("groups"), b.host_groups(h).expect("groups"), "{h}");
    }
    assert_eq!(a.host_groups("web-1").expect("groups"), ["vms", "prod", "prod_web"]);
}

#[test]
fn precedence_follows_ansible() {
    let inv = homelab("hosts.ini");
    let v = inv.host_vars("test-2").expect("vars");
    // group_vars/all.yml beats the inventory file's [all:vars].
    assert_eq!(v["vms_finalization_state_dir"], json!("/var/lib/cradle/finalization"));
    // [all:vars] still applies where nothing overrides it.
    assert_eq!(v["ansible_python_interpreter"], json!("/usr/bin/python3"));
    // group_vars/test/ (a directory: main.yml + network.yml), [test:vars], inline, host_vars.
    assert_eq!(v["test_gateway"], json!("10.0.20.1"));
    assert_eq!(v["vms_vmid_base"], json!(9100));
    assert_eq!(v["ansible_host"], json!("10.0.20.12"));
    assert_eq!(v["vms_os"], json!("ubuntu2404"));
    assert_eq!(v["inventory_hostname"], json!("test-2"));
    assert_eq!(v["group_names"], json!(["test", "vms"]));
    // The child group (prod_db, deeper) wins over its parent (prod); top-level keys replace.
    let db = inv.host_vars("db-1").expect("vars");
    assert_eq!(db["vms_config"]["cores"], json!(8));
    assert!(db["vms_config"].get("tags").is_some() && db["vms_config"].get("nic0").is_none());
    assert_eq!(db["vms_use_terraform"], json!("yes"), "prod's value, as written");
    assert_eq!(inv.skipped_vault_files().len(), 1);
}

#[test]
fn host_inline_vars_lose_to_host_vars_files_and_beat_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hosts"), "[g]\nh1 x=inline y=inline\n[g:vars]\nx=group\nz=group\n").expect("write");
    std::fs::create_dir_all(dir.path().join("host_vars")).expect("mkdir");
    std::fs::write(dir.path().join("host_vars/h1.yaml"), "y: file\n").expect("write");
    let inv = Inventory::load(&dir.path().join("hosts")).expect("load");
    let v = inv.host_vars("h1").expect("vars");
    assert_eq!((&v["x"], &v["y"], &v["z"]), (&json!("inline"), &json!("file"), &json!("group")));
}

#[test]
fn groups_of_equal_depth_merge_by_priority_then_name() {
    let inv = ini("[b]\nh\n[a]\nh\n[b:vars]\nv=b\n[a:vars]\nv=a\n");
    assert_eq!(inv.host_vars("h").expect("vars")["v"], json!("b"), "b sorts after a, so it wins");
    let inv = ini("[b]\nh\n[a]\nh\n[b:vars]\nv=b\n[a:vars]\nv=a\nansible_group_priority=10\n");
    assert_eq!(inv.host_vars("h").expect("vars")["v"], json!("a"), "a higher priority wins");
    let inv = ini("[parent:children]\nchild\n[child]\nh\n[child:vars]\nv=child\n[parent:vars]\nv=parent\n");
    assert_eq!(inv.host_vars("h").expect("vars")["v"], json!("child"));
}

#[test]
fn ini_sections_values_and_ungrouped() {
    let inv = ini(concat!(
        "lonely ansible_port=2200\n",
        "[web]\nweb[01:02]:2222 role='front end' n=5 flag=True l=\"[1, 2]\" ip=10.0.0.1 # comment\n",
        "[web:vars]\nnote=a value with spaces\nzero=010\n",
        "[all:vars]\nk=v\n",
    ));
    assert_eq!(names(&inv.hosts()), ["lonely", "web01", "web02"]);
    assert_eq!(names(&inv.group_hosts("ungrouped").expect("group")), ["lonely"]);
    let v = inv.host_vars("web02").expect("vars");
    assert_eq!(v["ansible_port"], json!(2222));
    assert_eq!(v["role"], json!("front end"));
    assert_eq!(v["n"], json!(5));
    assert_eq!(v["flag"], json!(true));
    assert_eq!(v["l"], json!([1, 2]));
    assert_eq!(v["ip"], json!("10.0.0.1"));
    assert_eq!(v["note"], json!("a value with spaces"));
    assert_eq!(v["zero"], json!("010"));
    assert_eq!(v["k"], json!("v"));
}

#[test]
fn an_ini_section_header_missing_its_bracket_is_refused_with_file_and_line() {
    for (text, line, fix) in [
        ("[test\ntest-0\n", 1, "write [test]"),
        ("[web]\nw1\n[test:vars # note\nx=1\n", 3, "write [test:vars]"),
        ("[g:children]\n[kid\n", 2, "write [kid]"),
    ] {
        let err = Inventory::from_ini(text, Path::new("hosts.ini")).expect_err(text).to_string();
        assert!(err.starts_with(&format!("hosts.ini:{line}: section header `")), "{err}");
        assert!(err.contains("is missing its closing `]`") && err.contains(fix), "{err}");
    }
}

#[test]
fn children_may_be_declared_after_use_but_must_be_declared() {
    let inv = ini("[parent:children]\nkid\n[kid]\nh1\n");
    assert_eq!(names(&inv.group_hosts("parent").expect("group")), ["h1"]);
    let err = Inventory::from_ini("[parent:children]\nkid\n", Path::new("hosts.ini")).expect_err("undeclared");
    assert!(err.to_string().contains("hosts.ini:2") && err.to_string().contains("add a [kid] section"), "{err}");
    let err = Inventory::from_ini("[ghost:vars]\nx=1\n", Path::new("hosts.ini")).expect_err("vars only");
    assert!(err.to_string().contains("[ghost:vars]"), "{err}");
    let err = Inventory::from_ini("[a:children]\nb\n[b:children]\na\n", Path::new("h.ini")).expect_err("cycle");
    assert!(err.to_string().contains("own descendant"), "{err}");
}

#[test]
fn malformed_ini_names_file_and_line() {
    for (text, needle) in [
        ("[web]\nh1 novalue\n", "h1.ini:2: expected key=value"),
        ("[web:kids]\n", "unknown type `kids`"),
        ("[web group]\n", "without spaces"),
        ("[web]\nh[3:1]\n", "begin is after the end"),
        ("[web]\nh1 x=\"open\n", "no closing quotation"),
    ] {
        let err = Inventory::from_ini(text, Path::new("h1.ini")).expect_err(text).to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn yaml_refuses_unknown_group_keys_and_tags() {
    let err = Inventory::from_yaml("all:\n  host:\n    h1:\n", Path::new("h.yml")).expect_err("typo");
    assert!(err.to_string().contains("key `host`"), "{err}");
    let err = Inventory::from_yaml("all:\n  hosts: [h1]\n", Path::new("h.yml")).expect_err("list");
    assert!(err.to_string().contains("must be a mapping"), "{err}");
    let err = Inventory::from_yaml("all:\n  vars:\n    x: !custom 1\n", Path::new("h.yml")).expect_err("tag");
    assert!(err.to_string().contains("unsupported YAML tag"), "{err}");
    let inv =
        Inventory::from_yaml("web:\n  hosts:\n    a:\n  vars:\n    pw: !vault |\n      $ANSIBLE\n", Path::new("h.yml"))
            .expect("inline vault is kept opaque");
    assert_eq!(names(&inv.hosts()), ["a"]);
    let err = Inventory::from_yaml("all:\n  hosts:\n    h1: [\n", Path::new("h.yml")).expect_err("syntax");
    assert!(err.to_string().starts_with("h.yml:"), "{err}");
}

#[test]
fn a_directory_inventory_reads_every_source_with_its_vars() {
    let inv = Inventory::load(&fixtures().join("split")).expect("dir");
    // `02-vms.yml` names `test` under `all:` explicitly; `proxmox` joins `all` when
    // the inventory is reconciled, after it (as in Ansible).
    assert_eq!(names(&inv.hosts()), ["test-0", "test-1", "pve1", "pve2"]);
    assert_eq!(inv.host_vars("test-1").expect("vars")["vms_config"]["memory"], json!("4G"));
}

fn lab() -> Inventory {
    homelab("hosts.ini")
}

fn sel(inv: &Inventory, p: &str) -> Vec<String> {
    inv.select(Some(p)).unwrap_or_else(|e| panic!("{p}: {e}")).into_iter().map(|h| h.to_string()).collect()
}

#[test]
fn patterns_names_groups_globs_and_sets() {
    let inv = lab();
    assert_eq!(names(&inv.select(None).expect("all")), HOMELAB_ORDER);
    assert_eq!(sel(&inv, "all"), HOMELAB_ORDER);
    assert_eq!(sel(&inv, "*"), HOMELAB_ORDER);
    assert_eq!(sel(&inv, "test-1"), ["test-1"]);
    assert_eq!(sel(&inv, "prod"), ["web-1", "web-2", "db-1"]);
    assert_eq!(sel(&inv, "test-?"), ["test-0", "test-1", "test-2", "test-3"]);
    assert_eq!(sel(&inv, "pve*"), ["pve1", "pve2", "pve3"]);
    // Results come back in inventory order, not pattern order.
    assert_eq!(sel(&inv, "db-1:test-3,pve2"), ["pve2", "test-3", "db-1"]);
    assert_eq!(sel(&inv, "vms:!prod"), ["test-0", "test-1", "test-2", "test-3"]);
    assert_eq!(sel(&inv, "!test:vms"), ["web-1", "web-2", "db-1"], "exclusions apply last");
    assert_eq!(sel(&inv, "vms:&prod_*"), ["web-1", "web-2", "db-1"]);
    assert_eq!(sel(&inv, "&prod_web"), ["web-1", "web-2"], "only & starts from all");
    assert_eq!(sel(&inv, "!proxmox:!test"), ["web-1", "web-2", "db-1"]);
    assert_eq!(sel(&inv, "test*:!test-0"), ["test-1", "test-2", "test-3"]);
}

#[test]
fn bad_patterns_are_errors_with_close_names() {
    let inv = lab();
    let err = inv.select(Some("tset-1")).expect_err("typo").to_string();
    assert!(err.contains("`tset-1` matches no host or group") && err.contains("test-1"), "{err}");
    let err = inv.select(Some("vms:!prdo")).expect_err("typo in exclusion").to_string();
    assert!(err.contains("`prdo`") && err.contains("prod"), "{err}");
    let err = inv.select(Some("test:&prod")).expect_err("empty").to_string();
    assert!(err.contains("selects no host"), "{err}");
    for p in ["~web.*", "test[0]", "@retry", ""] {
        assert!(inv.select(Some(p)).is_err(), "{p}");
    }
    let empty = Inventory::from_ini("[nothing]\n", Path::new("empty.ini")).expect("parses");
    assert!(empty.select(None).expect_err("no hosts").to_string().contains("empty.ini has no hosts"));
}

#[test]
fn glob_matches_star_and_question_mark() {
    assert!(limit::glob("web*", "web-1"));
    assert!(limit::glob("*-1", "web-1"));
    assert!(limit::glob("t?st-*", "test-0"));
    assert!(limit::glob("*", ""));
    assert!(!limit::glob("web?", "web"));
    assert!(!limit::glob("web", "web-1"));
    assert!(limit::glob("a*b*c", "aXbYbZc"));
}

#[test]
fn unknown_hosts_and_groups_name_close_candidates() {
    let inv = lab();
    let err = inv.host_vars("test-9").expect_err("unknown").to_string();
    assert!(err.contains("did you mean") && err.contains("test-0"), "{err}");
    assert!(inv.group_hosts("prodd").expect_err("unknown").to_string().contains("prod"));
}

#[test]
fn a_range_bomb_is_refused_by_the_cap_with_file_and_line_whatever_the_limit() {
    let err = Inventory::from_ini("[lab]\nvm-[0:99999999]\n", Path::new("hosts.ini")).expect_err("range bomb");
    let msg = err.to_string();
    assert!(msg.starts_with("hosts.ini:2:"), "{msg}");
    assert!(msg.contains("100000000 hosts") && msg.contains("10000"), "{msg}");
    let yaml = "all:\n  children:\n    lab:\n      hosts:\n        vm-[0:99999999]:\n";
    let msg = Inventory::from_yaml(yaml, Path::new("hosts.yml")).expect_err("range bomb").to_string();
    assert!(msg.contains("hosts.yml") && msg.contains("group `lab`") && msg.contains("10000"), "{msg}");
}

#[test]
fn an_inventory_of_more_than_100000_hosts_is_refused() {
    let mut ini = String::from("[lab]\n");
    for i in 0..11 {
        ini.push_str(&format!("r{i}-[1:10000]\n"));
    }
    let msg = Inventory::from_ini(&ini, Path::new("hosts.ini")).expect_err("too many hosts").to_string();
    assert!(msg.starts_with("hosts.ini:12:") && msg.contains("100000 hosts"), "{msg}");
}

#[test]
fn a_200_kb_nested_yaml_inventory_is_refused_with_the_nesting_cap() {
    // Flow nesting: the shape libyaml scans in quadratic time.
    let depth = 100_000;
    let flow = format!("all:\n  vars:\n    x: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    assert!(flow.len() >= 200_000);
    let msg = Inventory::from_yaml(&flow, Path::new("deep.yml")).expect_err("too deep").to_string();
    assert!(msg.starts_with("deep.yml:3:") && msg.contains("at most 64 levels"), "{msg}");
    // Block nesting of groups, padded to 200 KB.
    let mut block = String::from("all:\n");
    let mut d = 1;
    while block.len() < 200_000 {
        block.push_str(&format!("{}children:\n{}g{d}:\n", "  ".repeat(2 * d - 1), "  ".repeat(2 * d)));
        d += 1;
    }
    let msg = Inventory::from_yaml(&block, Path::new("groups.yml")).expect_err("too deep").to_string();
    assert!(msg.contains("groups.yml:") && msg.contains("at most 64 levels"), "{msg}");
}
