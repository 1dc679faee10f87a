//! The state's two growing collections, VMs and tasks, with each member's JSON
//! kept from one write of `state.json` to the next: a write renders only the
//! members that changed since the last one and copies the others. Rendering the
//! whole cluster on every batch of changes made the cost of a change grow with
//! the number of VMs (issue 10's profile: the simulator's largest cost).
//!
//! Contract: the collections hand out `&mut` members only through methods that
//! forget the member's rendered JSON ([`Vms::get_mut`], [`Tasks::find_mut`], ...);
//! reads go through `Deref` to the plain collection, which has no way to
//! mutate. So a member changed by any path is rendered anew at the next write,
//! and the compiler refuses a path that would bypass that. `Serialize` and
//! `Deserialize` are the plain collection's (the file format is unchanged); a
//! loaded collection starts with nothing rendered.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Task, Vm};

/// VMs by VMID (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Vms {
    map: BTreeMap<u32, Vm>,
    /// Rendered JSON of members unchanged since it was rendered (a member
    /// without an entry, or with `None`, is rendered at the next write).
    json: HashMap<u32, Option<String>>,
}

impl Deref for Vms {
    type Target = BTreeMap<u32, Vm>;

    fn deref(&self) -> &BTreeMap<u32, Vm> {
        &self.map
    }
}

impl Vms {
    /// The VM, to change it.
    pub fn get_mut(&mut self, vmid: &u32) -> Option<&mut Vm> {
        self.json.remove(vmid);
        self.map.get_mut(vmid)
    }

    /// Adds or replaces a VM.
    pub fn insert(&mut self, vmid: u32, vm: Vm) -> Option<Vm> {
        self.json.remove(&vmid);
        self.map.insert(vmid, vm)
    }

    /// Removes a VM.
    pub fn remove(&mut self, vmid: &u32) -> Option<Vm> {
        self.json.remove(vmid);
        self.map.remove(vmid)
    }

    /// Appends the collection as a JSON object (what `Serialize` writes),
    /// rendering only the members changed since the last call.
    pub fn write_json(&mut self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        for (i, (vmid, vm)) in self.map.iter().enumerate() {
            separate(out, i);
            // Map keys are strings in JSON, as serde writes a u32 key.
            write!(out, "\"{vmid}\":").map_err(serde_json::Error::io)?;
            out.extend_from_slice(rendered(self.json.entry(*vmid).or_default(), vm)?);
        }
        out.push(b'}');
        Ok(())
    }
}

impl Serialize for Vms {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Vms {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Vms, D::Error> {
        Ok(Vms { map: BTreeMap::deserialize(d)?, json: HashMap::new() })
    }
}

/// Tasks, oldest first (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    list: Vec<Task>,
    /// Rendered JSON per position, `None` once the task changed.
    json: Vec<Option<String>>,
}

impl Deref for Tasks {
    type Target = Vec<Task>;

    fn deref(&self) -> &Vec<Task> {
        &self.list
    }
}

impl Tasks {
    /// Appends a task.
    pub fn push(&mut self, task: Task) {
        self.list.push(task);
        self.json.push(None);
    }

    /// The newest task with this UPID, to change it.
    pub fn find_mut(&mut self, upid: &str) -> Option<&mut Task> {
        let i = self.list.iter().rposition(|t| t.upid == upid)?;
        self.json[i] = None;
        Some(&mut self.list[i])
    }

    /// Drops the `n` oldest tasks.
    pub fn drop_oldest(&mut self, n: usize) {
        let n = n.min(self.list.len());
        self.list.drain(..n);
        self.json.drain(..n);
    }

    /// Appends the list as a JSON array (what `Serialize` writes), rendering
    /// only the tasks changed since the last call.
    pub fn write_json(&mut self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'[');
        for (i, (task, json)) in self.list.iter().zip(self.json.iter_mut()).enumerate() {
            separate(out, i);
            out.extend_from_slice(rendered(json, task)?);
        }
        out.push(b']');
        Ok(())
    }
}

/// A comma before every member but the first.
fn separate(out: &mut Vec<u8>, index: usize) {
    if index > 0 {
        out.push(b',');
    }
}

/// The member's JSON: what `slot` holds, else rendered now and kept there.
fn rendered<'a, T: Serialize>(slot: &'a mut Option<String>, value: &T) -> serde_json::Result<&'a [u8]> {
    if slot.is_none() {
        *slot = Some(serde_json::to_string(value)?);
    }
    Ok(slot.as_deref().unwrap_or_default().as_bytes())
}

impl Serialize for Tasks {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tasks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tasks, D::Error> {
        let list = Vec::<Task>::deserialize(d)?;
        let json = vec![None; list.len()];
        Ok(Tasks { list, json })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClusterState, HaResource, Power, Task, Vm};

    fn vm(vmid: u32, name: &str) -> Vm {
        Vm::stopped(vmid, "pve1".into(), [("name".into(), name.into()), ("memory".into(), "1024".into())].into())
    }

    /// What the cached rendering wrote must be what plain serde writes for the
    /// same state, and a load of it must give the same state back.
    fn assert_renders_as_serde(st: &mut ClusterState) {
        let cached: serde_json::Value = serde_json::from_slice(&st.write_json().unwrap()).unwrap();
        assert_eq!(cached, serde_json::to_value(&*st).unwrap());
        let back: ClusterState = serde_json::from_value(cached).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&*st).unwrap());
    }

    #[test]
    fn a_write_renders_every_change_made_through_any_mutating_path() {
        let mut st = ClusterState::default();
        assert_renders_as_serde(&mut st);
        for vmid in [100, 101, 9000] {
            st.vms.insert(vmid, vm(vmid, &format!("vm-{vmid}")));
        }
        st.tasks.push(Task::new("pve1", 1001, "qmclone", "9000", "root@pam!cradle", Some(101)));
        st.tasks.push(Task::new("pve1", 1002, "qmstart", "101", "root@pam!cradle", Some(101)));
        st.ha_resources.insert(
            "vm:101".into(),
            HaResource { sid: "vm:101".into(), state: "started".into(), options: Default::default() },
        );
        st.next_pid = 1002;
        assert_renders_as_serde(&mut st);
        // Each change after a write must show in the next one.
        st.vms.get_mut(&101).unwrap().config.insert("ide2".into(), "local-lvm:cloudinit,media=cdrom".into());
        assert_renders_as_serde(&mut st);
        st.vms.get_mut(&101).unwrap().power = Power::Running;
        let upid = st.tasks[1].upid.clone();
        st.task_mut(&upid).unwrap().finish(Ok(()));
        assert_renders_as_serde(&mut st);
        st.vms.remove(&100);
        st.vms.insert(101, vm(101, "renamed"));
        let upids: Vec<String> = st.tasks.iter().map(|t| t.upid.clone()).collect();
        for upid in upids {
            st.task_mut(&upid).unwrap().log.push("line".into());
        }
        assert_renders_as_serde(&mut st);
        st.tasks.drop_oldest(1);
        st.id_counter = 7;
        assert_renders_as_serde(&mut st);
        // A loaded state renders everything anew.
        let mut loaded: ClusterState = serde_json::from_value(serde_json::to_value(&st).unwrap()).unwrap();
        assert_renders_as_serde(&mut loaded);
    }
}
