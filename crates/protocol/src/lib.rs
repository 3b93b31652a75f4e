//! What the kprof CLI and the agent share: the agent's option language ([`options`]) and the control
//! socket's protocol ([`control`]), so the CLI checks options the way the agent will and both ends agree on
//! where the socket is and what crosses it.

pub mod control;
pub mod engines;
pub mod options;
