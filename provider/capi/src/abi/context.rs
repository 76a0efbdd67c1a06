//! `struct ibv_device`, `struct ibv_context` (with its `ibv_context_ops`) and the
//! `struct verbs_context` that extends it, as rdma-core 44's verbs.h lays them out.

use std::ffi::c_void;
use std::os::raw::c_char;

use super::Opaque;

/// IBV_SYSFS_NAME_MAX
pub const SYSFS_NAME_MAX: usize = 64;
/// IBV_SYSFS_PATH_MAX
pub const SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    /// `struct _ibv_device_ops` (two obsolete function pointers).
    pub ops: [Opaque; 2],
    /// `enum ibv_node_type` (IBV_NODE_CA = 1).
    pub node_type: i32,
    /// `enum ibv_transport_type` (IBV_TRANSPORT_IB = 0).
    pub transport_type: i32,
    /// Device name.
    pub name: [c_char; SYSFS_NAME_MAX],
    /// Kernel device name (uverbsN).
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// sysfs path of the uverbs device.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// sysfs path of the IB device.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut super::IbvCq, i32, *mut super::IbvWc) -> i32;
/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyFn = unsafe extern "C" fn(*mut super::IbvCq, i32) -> i32;
/// `ibv_context_ops.post_send`.
pub type PostSendFn = unsafe extern "C" fn(
    *mut super::IbvQp,
    *mut super::IbvSendWr,
    *mut *mut super::IbvSendWr,
) -> i32;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn = unsafe extern "C" fn(
    *mut super::IbvQp,
    *mut super::IbvRecvWr,
    *mut *mut super::IbvRecvWr,
) -> i32;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn = unsafe extern "C" fn(
    *mut super::IbvSrq,
    *mut super::IbvRecvWr,
    *mut *mut super::IbvRecvWr,
) -> i32;
/// `ibv_context_ops.alloc_mw`.
pub type AllocMwFn = unsafe extern "C" fn(*mut super::IbvPd, u32) -> *mut super::IbvMw;
/// `ibv_context_ops.bind_mw`.
pub type BindMwFn =
    unsafe extern "C" fn(*mut super::IbvQp, *mut super::IbvMw, *mut super::IbvMwBind) -> i32;
/// `ibv_context_ops.dealloc_mw`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut super::IbvMw) -> i32;

/// `struct ibv_context_ops`: the operations the inline functions of verbs.h call.
#[repr(C)]
pub struct IbvContextOps {
    /// `_compat_query_device` .. `_compat_dereg_mr` (7 obsolete entries).
    pub compat0: [Opaque; 7],
    /// `alloc_mw`
    pub alloc_mw: Option<AllocMwFn>,
    /// `bind_mw`
    pub bind_mw: Option<BindMwFn>,
    /// `dealloc_mw`
    pub dealloc_mw: Option<DeallocMwFn>,
    /// `_compat_create_cq`
    pub compat1: Opaque,
    /// `poll_cq`
    pub poll_cq: Option<PollCqFn>,
    /// `req_notify_cq`
    pub req_notify_cq: Option<ReqNotifyFn>,
    /// `_compat_cq_event` .. `_compat_destroy_srq` (7 obsolete entries).
    pub compat2: [Opaque; 7],
    /// `post_srq_recv`
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// `_compat_create_qp` .. `_compat_destroy_qp`.
    pub compat3: [Opaque; 4],
    /// `post_send`
    pub post_send: Option<PostSendFn>,
    /// `post_recv`
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah` .. `_compat_async_event`.
    pub compat4: [Opaque; 5],
}

/// `pthread_mutex_t` on Linux x86_64 / aarch64 (40 / 48 bytes; all-zero is the initializer).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct PthreadMutex(pub [u8; std::mem::size_of::<libc::pthread_mutex_t>()]);

/// `pthread_cond_t` (48 bytes; all-zero is the initializer).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct PthreadCond(pub [u8; std::mem::size_of::<libc::pthread_cond_t>()]);

/// `struct ibv_context`.
#[repr(C)]
pub struct IbvContext {
    /// The device it was opened from.
    pub device: *mut IbvDevice,
    /// Operations.
    pub ops: IbvContextOps,
    /// Command fd (the emulator has none: -1).
    pub cmd_fd: i32,
    /// Async event fd.
    pub async_fd: i32,
    /// Completion vectors.
    pub num_comp_vectors: i32,
    /// Library mutex.
    pub mutex: PthreadMutex,
    /// `__VERBS_ABI_IS_EXTENDED` (all ones) marks a `verbs_context`.
    pub abi_compat: *mut c_void,
}

/// `verbs_context.query_port`.
pub type QueryPortFn =
    unsafe extern "C" fn(*mut IbvContext, u8, *mut super::IbvPortAttr, usize) -> i32;
/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut IbvContext, *mut super::IbvCqInitAttrEx) -> *mut super::IbvCqEx;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut IbvContext, *const c_void, *mut c_void, usize) -> i32;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut IbvContext, *mut super::IbvQpInitAttrEx) -> *mut super::IbvQp;
/// `verbs_context.create_srq_ex`.
pub type CreateSrqExFn = unsafe extern "C" fn(*mut IbvContext, *mut c_void) -> *mut super::IbvSrq;

/// `struct verbs_context`: the extended operations, growing towards lower addresses, then
/// `sz` and the `ibv_context` applications see. verbs.h finds it with `container_of` and
/// uses an operation only if `sz` says the library knows it.
#[repr(C)]
pub struct VerbsContext {
    /// `query_port`
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr` .. `query_rt_values` (24 entries the emulator does not offer).
    pub unsupported0: [Opaque; 24],
    /// `create_cq_ex`
    pub create_cq_ex: Option<CreateCqExFn>,
    /// `priv` (library-private).
    pub private: Opaque,
    /// `query_device_ex`
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow`, placeholder, `ibv_create_flow`, placeholder, `open_qp`.
    pub unsupported1: [Opaque; 5],
    /// `create_qp_ex`
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num`
    pub get_srq_num: Opaque,
    /// `create_srq_ex`
    pub create_srq_ex: Option<CreateSrqExFn>,
    /// `open_xrcd`, `close_xrcd`, `_ABI_placeholder3`.
    pub unsupported2: [Opaque; 3],
    /// Bytes of this structure the library knows (`sizeof(struct verbs_context)`).
    pub sz: usize,
    /// What applications get.
    pub context: IbvContext,
}
