//! HotSpot's performance counters file (`/tmp/hsperfdata_<user>/<pid>`, the one `jps` reads): the main
//! class, the Java version, whether the VM finished starting and whether it accepts attach, read without
//! touching the process.
//!
//! Layout: a 32-byte prologue (magic CA FE C0 C0, byte order, version, ..., offset and number of entries),
//! then entries of a 20-byte header (length, name offset, vector length, type, flags, units, variability,
//! data offset) followed by the name and the data. Strings are byte vectors ('B'), counters longs ('J').

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One counter's value.
#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    Long(i64),
    Text(String),
}

/// The counters of one JVM, by name.
#[derive(Clone, Default, Debug)]
pub struct PerfData {
    pub values: BTreeMap<String, Value>,
}

fn i32_at(data: &[u8], at: usize, little: bool) -> Option<i32> {
    let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if little { i32::from_le_bytes(b) } else { i32::from_be_bytes(b) })
}

fn i64_at(data: &[u8], at: usize, little: bool) -> Option<i64> {
    let b: [u8; 8] = data.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(if little { i64::from_le_bytes(b) } else { i64::from_be_bytes(b) })
}

impl PerfData {
    /// Parses a counters file; `None` if it is not one (or is cut short: entries past the damage are
    /// dropped, the ones before kept).
    pub fn parse(data: &[u8]) -> Option<PerfData> {
        if data.get(0..4)? != [0xca, 0xfe, 0xc0, 0xc0] {
            return None;
        }
        let little = *data.get(4)? == 1;
        let entry_offset = usize::try_from(i32_at(data, 24, little)?).ok()?;
        let entries = usize::try_from(i32_at(data, 28, little)?).ok()?;
        let mut values = BTreeMap::new();
        let mut at = entry_offset;
        for _ in 0..entries {
            let Some(entry) = Self::entry(data, at, little) else { break };
            let (len, name, value) = entry;
            if let Some(v) = value {
                values.insert(name, v);
            }
            at += len;
        }
        Some(PerfData { values })
    }

    /// (entry length, name, value if of a type kprof reads) of the entry at `at`.
    fn entry(data: &[u8], at: usize, little: bool) -> Option<(usize, String, Option<Value>)> {
        let len = usize::try_from(i32_at(data, at, little)?).ok().filter(|&l| l >= 20)?;
        let end = at.checked_add(len).filter(|&e| e <= data.len())?;
        let entry = &data[at..end];
        let name_at = usize::try_from(i32_at(entry, 4, little)?).ok()?;
        let vector_len = usize::try_from(i32_at(entry, 8, little)?).ok()?;
        let kind = entry[12];
        let data_at = usize::try_from(i32_at(entry, 16, little)?).ok()?;
        let name_bytes = entry.get(name_at..)?;
        let name = String::from_utf8_lossy(&name_bytes[..name_bytes.iter().position(|&b| b == 0)?]).into_owned();
        let value = match (kind, vector_len) {
            (b'J', 0) => i64_at(entry, data_at, little).map(Value::Long),
            (b'B', n) if n > 0 => entry.get(data_at..data_at.checked_add(n)?).map(|bytes| {
                let text = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
                Value::Text(String::from_utf8_lossy(text).into_owned())
            }),
            _ => None,
        };
        Some((len, name, value))
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        match self.values.get(name)? {
            Value::Text(s) => Some(s),
            Value::Long(_) => None,
        }
    }

    pub fn long(&self, name: &str) -> Option<i64> {
        match self.values.get(name)? {
            Value::Long(v) => Some(*v),
            Value::Text(_) => None,
        }
    }

    /// The main class (or `-jar` file) and its arguments, as `jps -m` shows them.
    pub fn java_command(&self) -> Option<&str> {
        self.text("sun.rt.javaCommand")
    }

    /// The Java version, e.g. `17.0.21.1`.
    pub fn java_version(&self) -> Option<&str> {
        self.text("java.property.java.version")
    }

    /// Whether the VM accepts dynamic attach: the first character of `sun.rt.jvmCapabilities` is '0'
    /// when it was started with -XX:+DisableAttachMechanism. `None` if the counter is missing.
    pub fn attach_supported(&self) -> Option<bool> {
        self.text("sun.rt.jvmCapabilities").and_then(|c| c.chars().next()).map(|c| c == '1')
    }

    /// When the VM began to start (`sun.rt.createVmBeginTime`, milliseconds since the epoch). `None` if
    /// the counter is missing.
    pub fn began_at(&self) -> Option<SystemTime> {
        let ms = u64::try_from(self.long("sun.rt.createVmBeginTime")?).ok()?;
        UNIX_EPOCH.checked_add(Duration::from_millis(ms))
    }

    /// Whether the VM finished starting (`sun.rt.createVmEndTime` set). `None` if the counter is missing.
    pub fn started(&self) -> Option<bool> {
        self.long("sun.rt.createVmEndTime").map(|t| t != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counters file with the given entries, little-endian as on x86-64.
    fn file(entries: &[(&str, Value)]) -> Vec<u8> {
        let mut out = vec![0xca, 0xfe, 0xc0, 0xc0, 1, 2, 0, 1];
        out.extend_from_slice(&[0; 16]);
        out.extend_from_slice(&32i32.to_le_bytes());
        out.extend_from_slice(&(entries.len() as i32).to_le_bytes());
        for (name, value) in entries {
            let mut name_bytes = name.as_bytes().to_vec();
            name_bytes.push(0);
            let (kind, vector, data) = match value {
                Value::Long(v) => (b'J', 0, v.to_le_bytes().to_vec()),
                Value::Text(s) => {
                    let mut d = s.as_bytes().to_vec();
                    d.resize(s.len() + 4, 0);
                    (b'B', d.len() as i32, d)
                }
            };
            let len = 20 + name_bytes.len() + data.len();
            out.extend_from_slice(&(len as i32).to_le_bytes());
            out.extend_from_slice(&20i32.to_le_bytes());
            out.extend_from_slice(&vector.to_le_bytes());
            out.extend_from_slice(&[kind, 0, 0, 0]);
            out.extend_from_slice(&((20 + name_bytes.len()) as i32).to_le_bytes());
            out.extend_from_slice(&name_bytes);
            out.extend_from_slice(&data);
        }
        out
    }

    #[test]
    fn reads_strings_and_longs() {
        let bytes = file(&[
            ("sun.rt.createVmEndTime", Value::Long(1234)),
            ("sun.rt.javaCommand", Value::Text("app.Main --port 80".into())),
            ("sun.rt.jvmCapabilities", Value::Text("0100".into())),
        ]);
        let p = PerfData::parse(&bytes).unwrap();
        assert_eq!(p.java_command(), Some("app.Main --port 80"));
        assert_eq!(p.started(), Some(true));
        assert_eq!(p.attach_supported(), Some(false));
        assert_eq!(p.java_version(), None);
    }

    #[test]
    fn truncated_or_foreign_files_never_panic() {
        let bytes = file(&[("sun.rt.javaCommand", Value::Text("x".into())), ("b", Value::Long(1))]);
        for cut in 0..bytes.len() {
            let _ = PerfData::parse(&bytes[..cut]);
        }
        assert!(PerfData::parse(b"not a counters file at all, no magic here").is_none());
        let mut garbage = bytes.clone();
        garbage[32] = 0xff; // an entry length that points past the end
        let p = PerfData::parse(&garbage).unwrap();
        assert!(p.values.is_empty());
    }
}
