//! GID types of a hardware port, from sysfs (`ibv_query_gid_ex` is an inline function that
//! rdma-sys does not bind; sysfs is also where rdma-core itself reads them on older kernels).

use softverbs_api::GidType;

/// The type of GID `index` of `port` on device `dev`: what
/// `/sys/class/infiniband/DEV/ports/PORT/gid_attrs/types/INDEX` says ("RoCE v2",
/// "IB/RoCE v1"); RoCE v2 when it cannot be read (an empty slot, an older kernel).
pub(crate) fn gid_type(dev: &str, port: u8, index: u32) -> GidType {
    let path = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim() == "RoCE v2" => GidType::RoceV2,
        Ok(s) if s.trim() == "IB/RoCE v1" => GidType::RoceV1,
        Ok(s) if s.trim() == "IB" => GidType::Ib,
        _ => GidType::RoceV2,
    }
}
