//! warpline
