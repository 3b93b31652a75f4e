//! pprof (gzipped protobuf).

use crate::profile::Profile;

pub fn render(_profile: &Profile) -> Vec<u8> {
    Vec::new()
}
