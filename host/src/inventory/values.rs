//! Typed readers for inventory values. Each reader accepts the spellings operators
//! write in INI and YAML (numbers as numbers or digit strings, Ansible booleans
//! `yes/no/true/false/on/off/1/0`, sizes with units) and otherwise returns an
//! `Invalid` error naming the host, the variable, the value, where it was set and
//! the accepted form.

use std::net::IpAddr;

use serde_json::Value;

use super::yaml::VAULT_MARKER;
use super::{Inventory, InventoryError};

/// The host being resolved, for error messages.
pub(crate) struct Ctx<'a> {
    pub(crate) inv: &'a Inventory,
    pub(crate) h: usize,
}

impl Ctx<'_> {
    pub(crate) fn host(&self) -> &str {
        &self.inv.hosts[self.h].name
    }

    pub(crate) fn invalid(&self, variable: &str, value: &Value, expected: &str) -> InventoryError {
        let top = variable.split(['.', '[']).next().unwrap_or(variable);
        let origin = match self.inv.var_scope(self.h, top) {
            Some((_, written)) => format!("set in {written}"),
            // Not written anywhere: cradle derived it, and says from what.
            None => derived_from(top).to_string(),
        };
        self.invalid_value(variable, value, origin, expected)
    }

    /// A value cradle derived rather than read (`origin` says from what, e.g.
    /// "derived from vms_vmid_base + index ...").
    pub(crate) fn invalid_value(
        &self,
        variable: &str,
        value: &Value,
        origin: String,
        expected: &str,
    ) -> InventoryError {
        let value = if is_vault(value) { "<vault-encrypted>".to_string() } else { value.to_string() };
        InventoryError::Invalid {
            host: self.host().to_string(),
            variable: variable.to_string(),
            value,
            origin,
            expected: expected.to_string(),
        }
    }

    pub(crate) fn missing(&self, variable: &str, hint: &str) -> InventoryError {
        InventoryError::Missing {
            host: self.host().to_string(),
            variable: variable.to_string(),
            hint: hint.to_string(),
        }
    }

    fn vault(&self, variable: &str, v: &Value) -> Result<(), InventoryError> {
        if is_vault(v) {
            return Err(self.invalid(
                variable,
                v,
                "a plain value: cradle does not decrypt Ansible Vault (keep secrets in cradle.toml secret references)",
            ));
        }
        Ok(())
    }

    pub(crate) fn string(&self, variable: &str, v: &Value) -> Result<String, InventoryError> {
        self.vault(variable, v)?;
        match v {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(self.invalid(variable, v, "a non-empty string")),
        }
    }

    pub(crate) fn int(&self, variable: &str, v: &Value, lo: u64, hi: u64, form: &str) -> Result<u64, InventoryError> {
        self.vault(variable, v)?;
        let n = match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.filter(|n| (lo..=hi).contains(n)).ok_or_else(|| self.invalid(variable, v, form))
    }

    pub(crate) fn boolean(&self, variable: &str, v: &Value) -> Result<bool, InventoryError> {
        self.vault(variable, v)?;
        let b = match v {
            Value::Bool(b) => Some(*b),
            Value::Number(n) => match n.as_i64() {
                Some(1) => Some(true),
                Some(0) => Some(false),
                _ => None,
            },
            Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "yes" | "true" | "on" | "1" | "y" | "t" => Some(true),
                "no" | "false" | "off" | "0" | "n" | "f" => Some(false),
                _ => None,
            },
            _ => None,
        };
        b.ok_or_else(|| self.invalid(variable, v, "a boolean: true/false (also yes/no, on/off, 1/0)"))
    }

    /// A size in `unit` MiB multiples: a plain number is already in the unit;
    /// `512M`, `4G`, `4GiB`, `1T` are converted. Returns whole units.
    pub(crate) fn size(&self, variable: &str, v: &Value, unit_mib: u64, form: &str) -> Result<u64, InventoryError> {
        self.vault(variable, v)?;
        let bad = || self.invalid(variable, v, form);
        let mib = match v {
            Value::Number(n) => n.as_u64().ok_or_else(bad)?.checked_mul(unit_mib).ok_or_else(bad)?,
            Value::String(s) => {
                let s = s.trim();
                let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
                let (num, suffix) = s.split_at(split);
                let n: u64 = num.parse().map_err(|_| bad())?;
                let factor = match suffix.trim().to_ascii_uppercase().as_str() {
                    "" => unit_mib,
                    "M" | "MB" | "MIB" => 1,
                    "G" | "GB" | "GIB" => 1024,
                    "T" | "TB" | "TIB" => 1024 * 1024,
                    _ => return Err(bad()),
                };
                n.checked_mul(factor).ok_or_else(bad)?
            }
            _ => return Err(bad()),
        };
        if mib == 0 || !mib.is_multiple_of(unit_mib) {
            return Err(bad());
        }
        Ok(mib / unit_mib)
    }

    pub(crate) fn ip(&self, variable: &str, v: &Value) -> Result<IpAddr, InventoryError> {
        self.vault(variable, v)?;
        v.as_str()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| self.invalid(variable, v, "an IP address, e.g. 10.0.20.1"))
    }

    /// A list of strings: a YAML list, or one string separated by commas or spaces.
    pub(crate) fn strings(&self, variable: &str, v: &Value) -> Result<Vec<String>, InventoryError> {
        self.vault(variable, v)?;
        let items: Vec<String> = match v {
            Value::Array(a) => a.iter().map(|x| self.string(variable, x)).collect::<Result<_, _>>()?,
            Value::String(s) => s.split([',', ';', ' ']).filter(|x| !x.is_empty()).map(str::to_string).collect(),
            Value::Null => Vec::new(),
            _ => return Err(self.invalid(variable, v, "a list of strings, or one string separated by commas")),
        };
        Ok(items)
    }
}

/// Where a value not set in the inventory came from, for [`Ctx::invalid`].
fn derived_from(variable: &str) -> &'static str {
    match variable {
        "vms_name" => "derived from the inventory hostname; set vms_name to choose another",
        _ => "not set in the inventory: derived by cradle",
    }
}

fn is_vault(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(VAULT_MARKER))
}

/// Whether `s` is a DNS label: 1..=63 letters, digits and hyphens, no hyphen at
/// either end.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl Ctx<'_> {
    /// Top-level variable `name`, its `{{ }}` references rendered.
    pub(crate) fn var(
        &self,
        r: &mut super::template::Renderer<'_>,
        name: &str,
    ) -> Result<Option<Value>, InventoryError> {
        r.var(name).map_err(|message| InventoryError::Template {
            host: self.host().to_string(),
            variable: name.to_string(),
            message,
        })
    }
}
