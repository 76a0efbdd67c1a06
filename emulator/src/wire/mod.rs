//! RoCEv2 wire format (being written).
