//! The journal entries the pipeline writes on the NetBox VM: read by NetBox
//! users, so they say what happened and what to do, with no workflow file,
//! line or error kind (the run, `cradle runs show RUN`, has those).

/// The success entry, written just before the VM is set Active.
pub fn success(name: &str, vmid: u32, node: &str, mac: &str, run_id: &str) -> String {
    format!("cradle: {name} is up (VMID {vmid} on {node}, MAC {mac}); run {run_id}")
}

/// The failure entry, written just before the VM is set Failed: the step,
/// the reason (one trailing full stop dropped, the sentence adds its own),
/// what to do, and the run when there is one.
pub fn failure(step: &str, message: &str, run_id: Option<&str>) -> String {
    let what = message.strip_suffix('.').unwrap_or(message);
    let run = run_id.map(|r| format!(" Details: cradle runs show {r}")).unwrap_or_default();
    format!("cradle failed at step {step}: {what}. Fix that, then set the VM to Staged again.{run}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_names_the_vm_its_vmid_node_mac_and_run() {
        assert_eq!(
            success("web-1", 140, "pve1", "BC:24:11:00:00:01", "r-1"),
            "cradle: web-1 is up (VMID 140 on pve1, MAC BC:24:11:00:00:01); run r-1"
        );
    }

    #[test]
    fn failure_says_the_step_the_reason_what_to_do_and_the_run() {
        assert_eq!(
            failure("validate", "web-1 cannot be built: NetBox has no custom field proxmox_template", Some("r-2")),
            "cradle failed at step validate: web-1 cannot be built: NetBox has no custom field proxmox_template. \
             Fix that, then set the VM to Staged again. Details: cradle runs show r-2"
        );
    }

    #[test]
    fn failure_drops_one_trailing_full_stop_and_omits_a_missing_run() {
        assert_eq!(
            failure("dhcp", "the controller already knows it.", None),
            "cradle failed at step dhcp: the controller already knows it. Fix that, then set the VM to Staged again."
        );
        assert!(failure("dns", "x..", None).starts_with("cradle failed at step dns: x.. Fix"));
    }
}
