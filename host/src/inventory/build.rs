//! Building the group graph the way Ansible's `InventoryData` does: the implicit
//! `all` (index 0) and `ungrouped` (index 1), groups created on first mention,
//! `reconcile` attaching parentless groups to `all` and groupless hosts to
//! `ungrouped`, depths as the longest path from `all`, and inventory order.
//!
//! Failure modes: a group that is (indirectly) its own child is an error naming
//! the cycle, as in Ansible; an entry that would take the inventory past
//! [`MAX_HOSTS`] is [`TooManyHosts`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use super::{ALL, Group, Host, Inventory, InventoryError, Layer, UNGROUPED};

/// The most hosts one inventory (all its files) may hold.
pub(crate) const MAX_HOSTS: usize = 100_000;

/// An entry would take the inventory past [`MAX_HOSTS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the inventory would hold more than {MAX_HOSTS} hosts (it has {has}, this entry adds {adds}); split it into several inventories"
)]
pub(crate) struct TooManyHosts {
    /// Hosts already in the inventory.
    has: usize,
    /// New hosts of the entry.
    adds: usize,
}

#[cfg(test)]
thread_local! {
    /// How often this thread walked a group's hosts ([`Inventory::group_host_ix`]):
    /// the tests prove resolving stays linear by counting walks, not time.
    pub(crate) static GROUP_WALKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Each group's host positions (host index → 0-based position among
/// [`Inventory::group_host_ix`]), built once per group on first use: resolving
/// every host of a 10,000-host group would otherwise walk the group once per
/// host. A cache of the finished inventory: cleared by [`Inventory::reconcile`],
/// empty in a clone.
#[derive(Default)]
pub(crate) struct Positions(Mutex<HashMap<usize, Arc<HashMap<usize, usize>>>>);

impl Positions {
    fn clear(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

impl Clone for Positions {
    fn clone(&self) -> Self {
        Positions::default()
    }
}

impl std::fmt::Debug for Positions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Positions")
    }
}

impl Inventory {
    pub(crate) fn empty(source: &Path) -> Inventory {
        let mut inv = Inventory {
            source: source.to_path_buf(),
            groups: Vec::new(),
            group_ix: HashMap::new(),
            hosts: Vec::new(),
            host_ix: HashMap::new(),
            order: Vec::new(),
            skipped_vault: Vec::new(),
            positions: Positions::default(),
        };
        inv.group("all");
        inv.group("ungrouped");
        inv.add_child(ALL, UNGROUPED);
        inv
    }

    /// The group named `name`, created if new.
    pub(crate) fn group(&mut self, name: &str) -> usize {
        if let Some(&g) = self.group_ix.get(name) {
            return g;
        }
        self.groups.push(Group {
            name: name.to_string(),
            vars: Layer::default(),
            file_vars: Layer::default(),
            hosts: Vec::new(),
            children: Vec::new(),
            parents: Vec::new(),
            depth: 0,
        });
        self.group_ix.insert(name.to_string(), self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// Whether the hosts of `names` not yet known fit under [`MAX_HOSTS`]
    /// (checked before they are added, so an inventory of many mid-sized ranges
    /// is refused before it fills memory).
    pub(crate) fn room_for(&self, names: &[String]) -> Result<(), TooManyHosts> {
        let new = names.iter().filter(|n| !self.host_ix.contains_key(n.as_str())).count();
        if self.hosts.len().saturating_add(new) > MAX_HOSTS {
            return Err(TooManyHosts { has: self.hosts.len(), adds: new });
        }
        Ok(())
    }

    /// Add host `name` to group `g` (creating the host), with its inventory vars.
    pub(crate) fn add_host(&mut self, name: &str, g: usize, vars: Vec<(String, Value)>, origin: &str) {
        let h = match self.host_ix.get(name) {
            Some(&h) => h,
            None => {
                self.hosts.push(Host {
                    name: name.to_string(),
                    vars: Layer::default(),
                    file_vars: Layer::default(),
                    groups: Vec::new(),
                });
                self.host_ix.insert(name.to_string(), self.hosts.len() - 1);
                self.hosts.len() - 1
            }
        };
        if !self.hosts[h].groups.contains(&g) {
            self.hosts[h].groups.push(g);
            self.groups[g].hosts.push(h);
        }
        for (k, v) in vars {
            self.hosts[h].vars.set(&k, v, origin);
        }
    }

    pub(crate) fn add_child(&mut self, parent: usize, child: usize) {
        if !self.groups[parent].children.contains(&child) {
            self.groups[parent].children.push(child);
            self.groups[child].parents.push(parent);
        }
    }

    /// Ansible's `reconcile_inventory`, then depths and inventory order.
    pub(crate) fn reconcile(&mut self) -> Result<(), InventoryError> {
        for g in 0..self.groups.len() {
            if g != ALL && self.groups[g].parents.is_empty() {
                self.add_child(ALL, g);
            }
        }
        for h in 0..self.hosts.len() {
            let others = self.hosts[h].groups.iter().any(|&g| g != ALL && g != UNGROUPED);
            let in_ungrouped = self.hosts[h].groups.contains(&UNGROUPED);
            if others && in_ungrouped {
                self.hosts[h].groups.retain(|&g| g != UNGROUPED);
                self.groups[UNGROUPED].hosts.retain(|&x| x != h);
            } else if !others && !in_ungrouped {
                self.hosts[h].groups.push(UNGROUPED);
                self.groups[UNGROUPED].hosts.push(h);
            }
        }
        let mut depth = vec![None; self.groups.len()];
        for g in 0..self.groups.len() {
            self.depth_of(g, &mut depth, &mut Vec::new())?;
        }
        for (g, d) in depth.into_iter().enumerate() {
            self.groups[g].depth = d.unwrap_or(0);
        }
        self.order = self.group_host_ix(ALL);
        self.positions.clear();
        Ok(())
    }

    fn depth_of(&self, g: usize, memo: &mut [Option<usize>], path: &mut Vec<usize>) -> Result<usize, InventoryError> {
        if let Some(d) = memo[g] {
            return Ok(d);
        }
        if let Some(pos) = path.iter().position(|&x| x == g) {
            let mut cycle: Vec<&str> = path[pos..].iter().map(|&x| self.groups[x].name.as_str()).collect();
            cycle.push(&self.groups[g].name);
            return Err(InventoryError::Parse {
                path: self.source.clone(),
                line: None,
                message: format!(
                    "group `{}` is its own descendant ({}); remove one of these children entries",
                    self.groups[g].name,
                    cycle.join(" -> ")
                ),
            });
        }
        path.push(g);
        let mut d = 0;
        for &p in &self.groups[g].parents {
            d = d.max(self.depth_of(p, memo, path)? + 1);
        }
        path.pop();
        memo[g] = Some(d);
        Ok(d)
    }

    /// Group `g` and its descendants, breadth first, children in declaration order.
    pub(crate) fn descendants(&self, g: usize) -> Vec<usize> {
        let mut ordered = vec![g];
        let mut seen: HashSet<usize> = HashSet::from([g]);
        let mut level = vec![g];
        while !level.is_empty() {
            let mut next = Vec::new();
            for &p in &level {
                for &c in &self.groups[p].children {
                    if seen.insert(c) {
                        ordered.push(c);
                        next.push(c);
                    }
                }
            }
            level = next;
        }
        ordered
    }

    /// Hosts of group `g` and its descendants, deduplicated, in group order.
    pub(crate) fn group_host_ix(&self, g: usize) -> Vec<usize> {
        #[cfg(test)]
        GROUP_WALKS.with(|n| n.set(n.get() + 1));
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for d in self.descendants(g) {
            for &h in &self.groups[d].hosts {
                if seen.insert(h) {
                    out.push(h);
                }
            }
        }
        out
    }

    /// Host `h`'s 0-based position among the hosts of group `g` and its
    /// descendants ([`Self::group_host_ix`]), or `None` if it is not one of them.
    pub(crate) fn position_in_group(&self, g: usize, h: usize) -> Option<usize> {
        let table = {
            let mut cache = self.positions.0.lock().unwrap_or_else(PoisonError::into_inner);
            cache
                .entry(g)
                .or_insert_with(|| {
                    Arc::new(self.group_host_ix(g).into_iter().enumerate().map(|(i, h)| (h, i)).collect())
                })
                .clone()
        };
        table.get(&h).copied()
    }

    /// Every group host `h` belongs to (directly or as an ancestor), without `all`,
    /// sorted by (depth, `ansible_group_priority`, name) as Ansible merges them.
    pub(crate) fn sorted_groups(&self, h: usize) -> Vec<usize> {
        let mut seen = HashSet::new();
        let mut stack: Vec<usize> = self.hosts[h].groups.clone();
        while let Some(g) = stack.pop() {
            if seen.insert(g) {
                stack.extend(self.groups[g].parents.iter().copied());
            }
        }
        seen.remove(&ALL);
        let mut groups: Vec<usize> = seen.into_iter().collect();
        groups.sort_by(|&a, &b| {
            let ka = (self.groups[a].depth, self.priority(a), &self.groups[a].name);
            let kb = (self.groups[b].depth, self.priority(b), &self.groups[b].name);
            ka.cmp(&kb)
        });
        groups
    }

    /// `ansible_group_priority` of group `g` (default 1).
    fn priority(&self, g: usize) -> i64 {
        let group = &self.groups[g];
        let v = group.file_vars.vars.get("ansible_group_priority").or(group.vars.vars.get("ansible_group_priority"));
        match v {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(1),
            _ => 1,
        }
    }
}
