//! What a device reports about itself: `query_device`, `query_port`, `query_gid`.

use softverbs_api::{
    DeviceAttr, Gid, GidEntry, GidType, Mtu, PortAttr, PortState, VerbsError, VerbsResult,
};

use super::device::Device;

/// Entries of a port's GID table: two in use (MAC link-local and IP), the rest empty, as a
/// kernel RoCE port's table has room beyond its addresses (rxe: 1024). Programs and tests
/// look for an empty entry (pyverbs' `test_query_gid_ex_bad_flow`).
pub(crate) const GID_TABLE_LEN: u32 = 16;

impl Device {
    /// What `query_device` reports.
    pub(crate) fn device_attr(&self) -> DeviceAttr {
        let guid = self.config.node_guid();
        let l = &self.config.limits;
        // Zero on a link without IP multicast: programs (pyverbs' tests) skip multicast then.
        let (mcast_groups, mcast_attach) = if self.serves_multicast() {
            (
                super::multicast::MAX_MCAST_GROUPS,
                super::multicast::MAX_MCAST_QP_ATTACH,
            )
        } else {
            (0, 0)
        };
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid: guid,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            max_sge: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_mw: l.max_mw,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_rd_atomic,
            max_qp_init_rd_atom: l.max_rd_atomic,
            max_srq: l.max_srq,
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_ah: l.max_ah,
            max_inline_data: l.max_inline_data,
            max_mcast_grp: mcast_groups,
            max_mcast_qp_attach: mcast_attach,
            max_total_mcast_qp_attach: mcast_groups * mcast_attach,
            phys_port_cnt: 1,
        }
    }

    /// What `query_port` reports for port `port_num` (there is one port, 1).
    pub(crate) fn port_attr(&self, port_num: u8) -> VerbsResult<PortAttr> {
        if port_num != 1 {
            return Err(VerbsError::inval(format!("no port {port_num} (ports: 1)")));
        }
        Ok(PortAttr {
            state: if self.port_active() {
                PortState::Active
            } else {
                PortState::Down
            },
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.active_mtu(),
            gid_tbl_len: GID_TABLE_LEN,
            pkey_tbl_len: 1,
            max_msg_sz: 1 << 31,
            link_layer_ethernet: true,
        })
    }

    /// Entry `index` of port `port_num`'s GID table: the link-local GID of the device's MAC,
    /// then the GID of its IP address; the other [`GID_TABLE_LEN`] entries are empty
    /// (ENODATA, as `ibv_query_gid_ex` says of an empty entry), beyond them EINVAL.
    pub(crate) fn gid_entry(&self, port_num: u8, index: u32) -> VerbsResult<GidEntry> {
        self.port_attr(port_num)?;
        let gid = match index {
            0 => Gid::link_local_from_mac(self.config.mac()),
            1 => Gid::from_ip(self.config.ip),
            _ if index < GID_TABLE_LEN => {
                return Err(VerbsError::Io {
                    errno: libc::ENODATA,
                    message: format!("GID index {index} is empty"),
                })
            }
            _ => {
                return Err(VerbsError::inval(format!(
                    "GID index {index} beyond the table ({GID_TABLE_LEN})"
                )))
            }
        };
        Ok(GidEntry {
            gid,
            gid_index: index,
            port_num,
            gid_type: GidType::RoceV2,
        })
    }
}
