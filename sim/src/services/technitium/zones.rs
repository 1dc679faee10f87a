//! The DNS server's authoritative zones and their records, with Technitium's rules for
//! adding, updating and deleting them (`DnsServerCore/WebServiceZonesApi.cs`,
//! `AuthZoneManager.cs`, v15.2).
//!
//! Contract: a zone is found for a name as the closest enclosing zone (`zone=` names
//! the start of that search). `add` appends to the RRset unless `overwrite` (then it
//! replaces the whole RRset of that type); appending an identical record fails with
//! "Cannot add record: record already exists.". `ptr` on A/AAAA also writes the PTR
//! (replacing that name's PTR RRset) into the closest reverse zone, creating a /24
//! (IPv4) or /64 (IPv6) Primary zone with `createPtrZone`, else "No reverse zone
//! available to add PTR record.". Deleting an A/AAAA record also deletes the PTR that
//! points back at that name. Errors are the exact texts the real server puts in
//! `errorMessage`; nothing here panics on client input.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::TechnitiumRecord;
use super::names::{now_iso, reverse_name, reverse_zone, ttl_string};
use crate::services::Stamp;

/// A record type the stand-in stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum RType {
    A,
    Ns,
    Cname,
    Soa,
    Ptr,
    Txt,
    Aaaa,
}

impl RType {
    /// Parse a `type=` value as .NET's `Enum.Parse(ignoreCase)` would for these.
    pub fn parse(s: &str) -> Result<RType, String> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "A" => RType::A,
            "NS" => RType::Ns,
            "CNAME" => RType::Cname,
            "SOA" => RType::Soa,
            "PTR" => RType::Ptr,
            "TXT" => RType::Txt,
            "AAAA" => RType::Aaaa,
            _ => return Err(format!("Requested value '{s}' was not found.")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            RType::A => "A",
            RType::Ns => "NS",
            RType::Cname => "CNAME",
            RType::Soa => "SOA",
            RType::Ptr => "PTR",
            RType::Txt => "TXT",
            RType::Aaaa => "AAAA",
        }
    }
}

/// Record data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RData {
    Ip(IpAddr),
    /// CNAME, PTR and NS targets (compared case-insensitively).
    Name(String),
    Txt(String),
    Soa {
        primary: String,
        responsible: String,
        serial: u32,
    },
}

impl RData {
    fn same(&self, other: &RData) -> bool {
        match (self, other) {
            (RData::Name(a), RData::Name(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        }
    }

    pub fn json(&self, rtype: RType) -> Value {
        match (self, rtype) {
            (RData::Ip(ip), _) => json!({"ipAddress": ip.to_string()}),
            (RData::Name(n), RType::Cname) => json!({"cname": n}),
            (RData::Name(n), RType::Ptr) => json!({"ptrName": n}),
            (RData::Name(n), _) => json!({"nameServer": n}),
            (RData::Txt(t), _) => json!({"text": t, "splitText": false}),
            (RData::Soa { primary, responsible, serial }, _) => json!({
                "primaryNameServer": primary, "responsiblePerson": responsible, "serial": serial,
                "refresh": 900, "retry": 300, "expire": 604800, "minimum": 900,
            }),
        }
    }

    fn value(&self) -> String {
        match self {
            RData::Ip(ip) => ip.to_string(),
            RData::Name(n) | RData::Txt(n) => n.clone(),
            RData::Soa { primary, .. } => primary.clone(),
        }
    }
}

/// One record.
#[derive(Debug, Clone)]
pub(super) struct Rec {
    pub name: String,
    pub rtype: RType,
    pub ttl: u32,
    pub data: RData,
    pub disabled: bool,
    pub comments: Option<String>,
    pub expiry_ttl: u32,
    pub modified: String,
    pub stamp: Stamp,
}

impl Rec {
    pub fn new(name: &str, rtype: RType, ttl: u32, data: RData) -> Rec {
        Rec {
            name: name.to_string(),
            rtype,
            ttl,
            data,
            disabled: false,
            comments: None,
            expiry_ttl: 0,
            modified: now_iso(),
            stamp: Stamp::now(),
        }
    }

    /// The authoritative-zone rendering of `WriteRecordAsJson`.
    pub fn json(&self) -> Value {
        let mut o = json!({
            "name": self.name, "type": self.rtype.name(), "ttl": self.ttl, "ttlString": ttl_string(self.ttl),
            "disabled": self.disabled,
        });
        if let (Some(c), Some(m)) = (self.comments.as_ref().filter(|c| !c.is_empty()), o.as_object_mut()) {
            m.insert("comments".into(), json!(c));
        }
        if let Some(m) = o.as_object_mut() {
            m.insert("rData".into(), self.data.json(self.rtype));
            m.insert("dnssecStatus".into(), json!("Unknown"));
            m.insert("lastUsedOn".into(), json!("0001-01-01T00:00:00"));
            m.insert("lastModified".into(), json!(self.modified));
            m.insert("expiryTtl".into(), json!(self.expiry_ttl));
            m.insert("expiryTtlString".into(), json!(ttl_string(self.expiry_ttl)));
        }
        o
    }

    pub fn public(&self, zone: &str) -> TechnitiumRecord {
        TechnitiumRecord {
            zone: zone.to_string(),
            name: self.name.clone(),
            record_type: self.rtype.name().to_string(),
            ttl: self.ttl,
            value: self.data.value(),
            disabled: self.disabled,
            comments: self.comments.clone(),
            modified: self.stamp,
        }
    }
}

/// An authoritative Primary zone.
#[derive(Debug, Clone)]
pub(super) struct Zone {
    pub name: String,
    pub records: Vec<Rec>,
    pub serial: u32,
    pub modified: String,
}

impl Zone {
    pub fn primary(name: &str, server: &str) -> Zone {
        let soa = RData::Soa { primary: server.to_string(), responsible: format!("hostadmin.{name}"), serial: 1 };
        Zone {
            name: name.to_string(),
            records: vec![
                Rec::new(name, RType::Soa, 900, soa),
                Rec::new(name, RType::Ns, 3600, RData::Name(server.into())),
            ],
            serial: 1,
            modified: now_iso(),
        }
    }

    /// `WriteZoneInfoAsJson` for a Primary zone.
    pub fn json(&self) -> Value {
        json!({
            "name": self.name, "type": "Primary", "lastModified": self.modified, "disabled": false,
            "soaSerial": self.serial, "internal": false, "catalog": null, "dnssecStatus": "Unsigned",
            "hasDnssecPrivateKeys": false, "notifyFailed": false, "notifyFailedFor": [],
        })
    }

    /// Bump the SOA serial after a change.
    fn touched(&mut self) {
        self.serial = self.serial.wrapping_add(1);
        self.modified = now_iso();
        let serial = self.serial;
        for r in self.records.iter_mut().filter(|r| r.rtype == RType::Soa) {
            if let RData::Soa { serial: s, .. } = &mut r.data {
                *s = serial;
            }
        }
    }

    pub fn contains(&self, domain: &str) -> bool {
        belongs(&self.name, domain)
    }
}

/// Whether `domain` is `zone` or below it.
fn belongs(zone: &str, domain: &str) -> bool {
    let (d, z) = (domain.as_bytes(), zone.as_bytes());
    z.is_empty()
        || d.eq_ignore_ascii_case(z)
        || (d.len() > z.len() && d[d.len() - z.len() - 1] == b'.' && d[d.len() - z.len()..].eq_ignore_ascii_case(z))
}

/// All zones of the server.
#[derive(Debug, Default)]
pub(super) struct Zones {
    pub zones: Vec<Zone>,
    pub server: String,
    pub default_ttl: u32,
}

/// A record to add (parsed from the request).
pub(super) struct NewRecord {
    pub domain: String,
    pub rtype: RType,
    pub ttl: u32,
    pub data: RData,
    pub overwrite: bool,
    pub comments: Option<String>,
    pub expiry_ttl: u32,
    /// For A/AAAA: add the PTR; create its /24 or /64 zone when missing.
    pub ptr: Option<bool>,
}

impl Zones {
    /// `FindAuthZoneInfo`: the closest zone enclosing `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.contains(name))
            .max_by_key(|(_, z)| z.name.len())
            .map(|(i, _)| i)
    }

    /// `CreatePrimaryZone`; `Err` = "Zone already exists: x".
    pub fn create(&mut self, name: &str) -> Result<usize, String> {
        if self.zones.iter().any(|z| z.name.eq_ignore_ascii_case(name)) {
            return Err(format!("Zone already exists: {name}"));
        }
        self.zones.push(Zone::primary(&name.to_ascii_lowercase(), &self.server));
        Ok(self.zones.len() - 1)
    }

    /// The zone an API call addresses: `zone=` if given, else `domain`.
    pub fn target(&self, domain: &str, zone: Option<&str>) -> Result<usize, String> {
        self.find(zone.filter(|z| !z.is_empty()).unwrap_or(domain))
            .ok_or_else(|| format!("No such zone was found: {domain}"))
    }

    fn check_belongs(&self, zi: usize, domain: &str) -> Result<(), String> {
        let z = &self.zones[zi];
        if z.contains(domain) {
            Ok(())
        } else {
            Err(format!("The domain name '{domain}' does not belong to the zone: {}", z.name))
        }
    }

    /// Write the PTR for `ip` → `domain` (SetRecord: replaces that name's PTRs).
    fn set_ptr(
        &mut self,
        ip: IpAddr,
        domain: &str,
        ttl: u32,
        expiry_ttl: u32,
        create_zone: bool,
    ) -> Result<(), String> {
        let ptr_name = reverse_name(ip);
        let zi = match self.find(&ptr_name) {
            Some(zi) => zi,
            None if create_zone => self.create(&reverse_zone(ip, if ip.is_ipv4() { 24 } else { 64 }))?,
            None => return Err("No reverse zone available to add PTR record.".into()),
        };
        let zone = &mut self.zones[zi];
        zone.records.retain(|r| !(r.rtype == RType::Ptr && r.name.eq_ignore_ascii_case(&ptr_name)));
        let mut rec = Rec::new(&ptr_name, RType::Ptr, ttl, RData::Name(domain.to_string()));
        rec.expiry_ttl = expiry_ttl;
        zone.records.push(rec);
        zone.touched();
        Ok(())
    }

    /// `records/add` into zone `zi`; returns the added record.
    pub fn add(&mut self, zi: usize, new: NewRecord) -> Result<Rec, String> {
        if let (RData::Ip(ip), Some(create_zone)) = (&new.data, new.ptr) {
            self.set_ptr(*ip, &new.domain, new.ttl, new.expiry_ttl, create_zone)?;
        }
        self.check_belongs(zi, &new.domain)?;
        let zone = &mut self.zones[zi];
        let same_set = |r: &Rec| r.rtype == new.rtype && r.name.eq_ignore_ascii_case(&new.domain);
        if new.rtype == RType::Cname && !new.overwrite && zone.records.iter().any(same_set) {
            return Err("Record already exists. Use overwrite option if you wish to overwrite existing record.".into());
        }
        let mut rec = Rec::new(&new.domain, new.rtype, new.ttl, new.data);
        rec.comments = new.comments;
        rec.expiry_ttl = new.expiry_ttl;
        if new.overwrite || new.rtype == RType::Cname {
            zone.records.retain(|r| !same_set(r));
        } else if zone.records.iter().any(|r| same_set(r) && r.data.same(&rec.data)) {
            return Err("Cannot add record: record already exists.".into());
        }
        zone.records.push(rec.clone());
        zone.touched();
        Ok(rec)
    }

    /// `records/get`: the records at `domain`, or the whole zone.
    pub fn get(&self, zi: usize, domain: &str, list_zone: bool) -> Vec<Rec> {
        let mut recs: Vec<Rec> = self.zones[zi]
            .records
            .iter()
            .filter(|r| list_zone || r.name.eq_ignore_ascii_case(domain))
            .cloned()
            .collect();
        recs.sort_by_key(|r| (r.name.to_ascii_lowercase(), r.rtype));
        recs
    }

    /// `records/delete` of one record (CNAME: the whole RRset); A/AAAA also drop the
    /// PTR pointing back at `domain` in a Primary reverse zone.
    pub fn delete(&mut self, zi: usize, domain: &str, rtype: RType, data: Option<&RData>) -> Result<(), String> {
        self.check_belongs(zi, domain)?;
        let zone = &mut self.zones[zi];
        let before = zone.records.len();
        zone.records.retain(|r| {
            let hit = r.rtype == rtype && r.name.eq_ignore_ascii_case(domain) && data.is_none_or(|d| r.data.same(d));
            !hit
        });
        if zone.records.len() == before {
            return Err("Cannot delete record: no such record exists.".into());
        }
        zone.touched();
        if let Some(RData::Ip(ip)) = data {
            let ptr_name = reverse_name(*ip);
            if let Some(ri) = self.find(&ptr_name) {
                let rz = &mut self.zones[ri];
                let back = rz.records.iter().position(|r| {
                    r.rtype == RType::Ptr
                        && r.name.eq_ignore_ascii_case(&ptr_name)
                        && matches!(&r.data, RData::Name(n) if n.eq_ignore_ascii_case(domain))
                });
                if let Some(p) = back {
                    rz.records.remove(p);
                    rz.touched();
                }
            }
        }
        Ok(())
    }

    /// `records/update` of an A/AAAA record (`ptr`: move the PTR, `Some(create)`).
    #[allow(clippy::too_many_arguments, reason = "one update call's parameters, as the API names them")]
    pub fn update(
        &mut self,
        zi: usize,
        domain: &str,
        new_domain: &str,
        rtype: RType,
        old: RData,
        new: RData,
        ttl: u32,
        ptr: Option<bool>,
        disable: bool,
        comments: Option<String>,
    ) -> Result<Rec, String> {
        if let (RData::Ip(old_ip), RData::Ip(new_ip), Some(create_zone)) = (&old, &new, ptr) {
            let new_ptr = reverse_name(*new_ip);
            if self.find(&new_ptr).is_none() && !create_zone {
                return Err("No reverse zone available to add PTR record.".into());
            }
            let old_ptr = reverse_name(*old_ip);
            if let Some(oi) = self.find(&old_ptr) {
                let oz = &mut self.zones[oi];
                oz.records.retain(|r| !(r.rtype == RType::Ptr && r.name.eq_ignore_ascii_case(&old_ptr)));
                oz.touched();
            }
            self.set_ptr(*new_ip, domain, ttl, 0, create_zone)?;
        }
        self.check_belongs(zi, domain)?;
        self.check_belongs(zi, new_domain)?;
        let zone = &mut self.zones[zi];
        if !zone.records.iter().any(|r| r.name.eq_ignore_ascii_case(domain)) {
            return Err(format!("Cannot update record: zone '{}' does not exists.", zone.name));
        }
        let pos = zone
            .records
            .iter()
            .position(|r| r.rtype == rtype && r.name.eq_ignore_ascii_case(domain) && r.data.same(&old))
            .ok_or("Cannot update record: the old record does not exists.")?;
        zone.records.remove(pos);
        let mut rec = Rec::new(new_domain, rtype, ttl, new);
        rec.disabled = disable;
        rec.comments = comments;
        zone.records.push(rec.clone());
        zone.touched();
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones() -> Zones {
        let mut z = Zones { server: "dns.sim".into(), default_ttl: 3600, ..Zones::default() };
        z.create("lab.example.com").unwrap();
        z
    }

    fn a(domain: &str, ip: &str, overwrite: bool, ptr: Option<bool>) -> NewRecord {
        NewRecord {
            domain: domain.into(),
            rtype: RType::A,
            ttl: 300,
            data: RData::Ip(ip.parse().unwrap()),
            overwrite,
            comments: None,
            expiry_ttl: 0,
            ptr,
        }
    }

    #[test]
    fn add_appends_or_overwrites_and_ptr_needs_a_reverse_zone() {
        let mut z = zones();
        let zi = z.target("vm01.lab.example.com", Some("lab.example.com")).unwrap();
        z.add(zi, a("vm01.lab.example.com", "192.0.2.10", false, None)).unwrap();
        z.add(zi, a("vm01.lab.example.com", "192.0.2.11", false, None)).unwrap();
        assert_eq!(z.get(zi, "vm01.lab.example.com", false).len(), 2);
        assert_eq!(
            z.add(zi, a("vm01.lab.example.com", "192.0.2.11", false, None)).unwrap_err(),
            "Cannot add record: record already exists."
        );
        z.add(zi, a("vm01.lab.example.com", "192.0.2.12", true, None)).unwrap();
        assert_eq!(z.get(zi, "vm01.lab.example.com", false).len(), 1);
        let err = z.add(zi, a("vm01.lab.example.com", "192.0.2.12", true, Some(false))).unwrap_err();
        assert_eq!(err, "No reverse zone available to add PTR record.");
        z.add(zi, a("vm01.lab.example.com", "192.0.2.12", true, Some(true))).unwrap();
        let ri = z.find("12.2.0.192.in-addr.arpa").unwrap();
        assert_eq!(z.zones[ri].name, "2.0.192.in-addr.arpa");
        // Deleting the A record removes its PTR; deleting again is an error.
        z.delete(zi, "vm01.lab.example.com", RType::A, Some(&RData::Ip("192.0.2.12".parse().unwrap()))).unwrap();
        assert!(z.get(ri, "12.2.0.192.in-addr.arpa", false).is_empty());
        let err = z.delete(zi, "vm01.lab.example.com", RType::A, Some(&RData::Ip("192.0.2.12".parse().unwrap())));
        assert_eq!(err.unwrap_err(), "Cannot delete record: no such record exists.");
        assert_eq!(z.target("x.other.org", None).unwrap_err(), "No such zone was found: x.other.org");
        assert_eq!(z.create("lab.example.com").unwrap_err(), "Zone already exists: lab.example.com");
    }

    #[test]
    fn update_moves_the_address_and_its_ptr() {
        let mut z = zones();
        z.create("2.0.192.in-addr.arpa").unwrap();
        let zi = z.target("vm01.lab.example.com", None).unwrap();
        z.add(zi, a("vm01.lab.example.com", "192.0.2.10", true, Some(false))).unwrap();
        let (old, new) = (RData::Ip("192.0.2.10".parse().unwrap()), RData::Ip("192.0.2.20".parse().unwrap()));
        let d = "vm01.lab.example.com";
        z.update(zi, d, d, RType::A, old.clone(), new.clone(), 300, Some(false), false, None).unwrap();
        let ri = z.find("2.0.192.in-addr.arpa").unwrap();
        assert!(z.get(ri, "10.2.0.192.in-addr.arpa", false).is_empty());
        assert_eq!(z.get(ri, "20.2.0.192.in-addr.arpa", false).len(), 1);
        let err = z.update(zi, d, d, RType::A, old, new, 300, None, false, None).unwrap_err();
        assert_eq!(err, "Cannot update record: the old record does not exists.");
    }
}
