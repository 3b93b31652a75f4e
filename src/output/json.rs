//! The JSON calling context tree.

use crate::profile::Profile;

pub fn render(_profile: &Profile) -> Vec<u8> {
    b"{}".to_vec()
}

pub fn parse(_text: &str) -> Result<Profile, String> {
    Err("json reader not built yet".into())
}
