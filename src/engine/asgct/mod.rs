//! mode=asgct.
