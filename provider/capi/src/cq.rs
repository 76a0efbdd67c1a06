//! Completion queues: `ibv_cq` (create, destroy, poll, notify) and the extended `ibv_cq_ex`
//! polling interface. Completion channels are in `channel`.

use std::ffi::c_void;

use parking_lot::Mutex;
use softverbs_api::{CqPoller, WcFlags, WorkCompletion};

use crate::abi::*;
use crate::channel::SvChannel;
use crate::handle::{
    fail_null, is_live, live_context, register, unregister, Kind, SvContext, SvCq,
};

extern "C" fn sv_start_poll(cq: *mut IbvCqEx, attr: *mut IbvPollCqAttr) -> i32 {
    // SAFETY: attr is NULL or an ibv_poll_cq_attr.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    next_poll(cq)
}

extern "C" fn sv_next_poll(cq: *mut IbvCqEx) -> i32 {
    next_poll(cq)
}

extern "C" fn sv_end_poll(_cq: *mut IbvCqEx) {}

fn next_poll(cq: *mut IbvCqEx) -> i32 {
    // SAFETY: cq is one of our CQs (the application calls these through its own table).
    let sv = unsafe { &*(cq as *const SvCq) };
    // SAFETY: its context is open while the CQ lives.
    let ctx = unsafe { SvContext::from_ptr(sv.cq.cq.context) }.expect("CQ has a context");
    let mut one = [WorkCompletion::default()];
    match ctx.poll(sv, &mut one) {
        Ok(0) => libc::ENOENT,
        Ok(_) => {
            // SAFETY: the application serialises polling of one CQ; the fields are plain data.
            unsafe {
                (*cq).wr_id = one[0].wr_id;
                (*cq).status = one[0].status.to_raw();
            }
            *sv.current.lock() = one[0];
            0
        }
        Err(e) => e.errno(),
    }
}

fn current(cq: *mut IbvCqEx) -> WorkCompletion {
    // SAFETY: cq is one of our CQs.
    let sv = unsafe { &*(cq as *const SvCq) };
    *sv.current.lock()
}

extern "C" fn sv_read_opcode(cq: *mut IbvCqEx) -> u32 {
    current(cq).opcode.to_raw()
}
extern "C" fn sv_read_vendor_err(cq: *mut IbvCqEx) -> u32 {
    current(cq).vendor_err
}
extern "C" fn sv_read_byte_len(cq: *mut IbvCqEx) -> u32 {
    current(cq).byte_len
}
extern "C" fn sv_read_imm_data(cq: *mut IbvCqEx) -> u32 {
    let w = current(cq);
    if w.wc_flags.contains(WcFlags::WITH_INV) {
        w.invalidated_rkey
    } else {
        w.imm_data.to_be()
    }
}
extern "C" fn sv_read_qp_num(cq: *mut IbvCqEx) -> u32 {
    current(cq).qp_num
}
extern "C" fn sv_read_src_qp(cq: *mut IbvCqEx) -> u32 {
    current(cq).src_qp
}
extern "C" fn sv_read_wc_flags(cq: *mut IbvCqEx) -> u32 {
    current(cq).wc_flags.bits()
}
extern "C" fn sv_read_slid(cq: *mut IbvCqEx) -> u32 {
    current(cq).slid as u32
}
extern "C" fn sv_read_sl(cq: *mut IbvCqEx) -> u8 {
    current(cq).sl
}
extern "C" fn sv_read_dlid_path_bits(cq: *mut IbvCqEx) -> u8 {
    current(cq).dlid_path_bits
}
extern "C" fn sv_read_zero_u64(_cq: *mut IbvCqEx) -> u64 {
    0
}
extern "C" fn sv_read_zero_u16(_cq: *mut IbvCqEx) -> u16 {
    0
}
extern "C" fn sv_read_zero_u32(_cq: *mut IbvCqEx) -> u32 {
    0
}

/// IBV_WC_EX_WITH_* flags the emulator can read: byte_len, imm, qp_num, src_qp, slid,
/// sl, dlid_path_bits (completion timestamps, cvlan, flow tag and tag matching are not).
const WC_FLAGS_SUPPORTED: u64 = 0b1111111;

unsafe fn create(
    context: *mut IbvContext,
    cqe: i32,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: u32,
) -> *mut IbvCqEx {
    // SAFETY: checked live.
    let Some(ctx) = (unsafe { live_context(context) }) else {
        return fail_null(libc::EINVAL);
    };
    let max_cqe = ctx.backend().query_device().map_or(0, |d| d.max_cqe);
    // SAFETY: live context.
    let vectors = unsafe { (*context).num_comp_vectors } as u32;
    if cqe < 0 || cqe as u32 > max_cqe || comp_vector >= vectors {
        return fail_null(libc::EINVAL);
    }
    let channel_id = if channel.is_null() {
        None
    } else if is_live(channel, Kind::Channel) {
        // SAFETY: a live SvChannel.
        Some(unsafe { (*(channel as *mut SvChannel)).id })
    } else {
        return fail_null(libc::EINVAL);
    };
    let (id, granted) = match ctx.backend().create_cq(cqe.max(1) as u32, channel_id) {
        Ok(v) => v,
        Err(e) => return fail_null(e.errno()),
    };
    if !channel.is_null() {
        // SAFETY: live channel.
        unsafe { (*channel).refcnt += 1 };
    }
    let sv = Box::new(SvCq {
        cq: IbvCqEx {
            cq: IbvCq {
                context,
                channel,
                cq_context,
                handle: id,
                cqe: granted.min(i32::MAX as u32) as i32,
                mutex: PthreadMutex([0; std::mem::size_of::<libc::pthread_mutex_t>()]),
                cond: PthreadCond([0; std::mem::size_of::<libc::pthread_cond_t>()]),
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(sv_start_poll),
            next_poll: Some(sv_next_poll),
            end_poll: Some(sv_end_poll),
            read_opcode: Some(sv_read_opcode),
            read_vendor_err: Some(sv_read_vendor_err),
            read_byte_len: Some(sv_read_byte_len),
            read_imm_data: Some(sv_read_imm_data),
            read_qp_num: Some(sv_read_qp_num),
            read_src_qp: Some(sv_read_src_qp),
            read_wc_flags: Some(sv_read_wc_flags),
            read_slid: Some(sv_read_slid),
            read_sl: Some(sv_read_sl),
            read_dlid_path_bits: Some(sv_read_dlid_path_bits),
            read_completion_ts: Some(sv_read_zero_u64),
            read_cvlan: Some(sv_read_zero_u16),
            read_flow_tag: Some(sv_read_zero_u32),
            read_tm_info: 0,
            read_completion_wallclock_ns: Some(sv_read_zero_u64),
        },
        current: Mutex::new(WorkCompletion::default()),
        poller: CqPoller::new(ctx.backend(), id),
    });
    let p = Box::into_raw(sv) as *mut IbvCqEx;
    register(p as *mut IbvCq, Kind::Cq);
    ctx.cqs.lock().insert(id, p as usize);
    p
}

/// `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_cq(
    context: *mut IbvContext,
    cqe: i32,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: i32,
) -> *mut IbvCq {
    // SAFETY: arguments forwarded as the application gave them; create checks them.
    unsafe { create(context, cqe, cq_context, channel, comp_vector as u32) as *mut IbvCq }
}

/// `verbs_context.create_cq_ex`.
pub unsafe extern "C" fn sv_create_cq_ex(
    context: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
) -> *mut IbvCqEx {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: non-NULL attribute structure of the application.
    let a = unsafe { &*attr };
    // comp_mask may name FLAGS (1) and PD (2, a parent domain: not supported).
    if a.comp_mask & !0b11 != 0 {
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & 2 != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    // IBV_CREATE_CQ_ATTR_SINGLE_THREADED (1) is a hint; IGNORE_OVERRUN (2) is not offered.
    if a.comp_mask & 1 != 0 && a.flags & !1 != 0 {
        return fail_null(if a.flags & !0b11 != 0 {
            libc::EINVAL
        } else {
            libc::EOPNOTSUPP
        });
    }
    if a.wc_flags & !WC_FLAGS_SUPPORTED != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: as above.
    unsafe {
        create(
            context,
            a.cqe.min(i32::MAX as u32) as i32,
            a.cq_context,
            a.channel,
            a.comp_vector,
        )
    }
}

/// `ibv_destroy_cq`: EBUSY while QPs use it.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_cq(cq: *mut IbvCq) -> i32 {
    if !is_live(cq, Kind::Cq) {
        return libc::EINVAL;
    }
    // SAFETY: a live CQ of ours, inside an SvCq, with an open context.
    let (ctx, id, channel) = unsafe {
        (
            SvContext::from_ptr((*cq).context).expect("live"),
            (*cq).handle,
            (*cq).channel,
        )
    };
    if let Err(e) = ctx.backend().destroy_cq(id) {
        return e.errno();
    }
    unregister(cq, Kind::Cq);
    ctx.cqs.lock().remove(&id);
    if !channel.is_null() && is_live(channel, Kind::Channel) {
        // SAFETY: live channel.
        unsafe { (*channel).refcnt -= 1 };
    }
    // SAFETY: made by Box::into_raw in create, unregistered: freed once.
    drop(unsafe { Box::from_raw(cq as *mut SvCq) });
    0
}

/// `ibv_resize_cq`: the CQ holds at least `cqe` completions from now on, keeping those
/// queued; `cq->cqe` says the granted size. EINVAL for a size outside 1..=max_cqe or below
/// the completions queued, as rxe.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_resize_cq(cq: *mut IbvCq, cqe: i32) -> i32 {
    if !is_live(cq, Kind::Cq) || cqe <= 0 {
        return libc::EINVAL;
    }
    // SAFETY: a live CQ of ours with an open context; the application does not resize it
    // from two threads at once (libibverbs' contract for the call).
    let (ctx, id) = unsafe {
        (
            SvContext::from_ptr((*cq).context).expect("live"),
            (*cq).handle,
        )
    };
    match ctx.backend().resize_cq(id, cqe as u32) {
        Ok(granted) => {
            // SAFETY: as above.
            unsafe { (*cq).cqe = granted.min(i32::MAX as u32) as i32 };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_context_ops.poll_cq`.
pub unsafe extern "C" fn sv_poll_cq(cq: *mut IbvCq, num_entries: i32, wc: *mut IbvWc) -> i32 {
    if cq.is_null() || num_entries < 0 || (wc.is_null() && num_entries > 0) {
        return -libc::EINVAL;
    }
    // SAFETY: the application polls a CQ it created through us.
    let sv = unsafe { &*(cq as *const SvCq) };
    // SAFETY: its context is open while it lives.
    let ctx = unsafe { SvContext::from_ptr((*cq).context) }.expect("CQ has a context");
    let mut buf = [WorkCompletion::default(); 16];
    let mut done = 0usize;
    let want = num_entries as usize;
    while done < want {
        let chunk = (want - done).min(buf.len());
        let n = match ctx.poll(sv, &mut buf[..chunk]) {
            Ok(n) => n,
            Err(e) if done == 0 => return -e.errno(),
            Err(_) => break,
        };
        for (i, w) in buf[..n].iter().enumerate() {
            // SAFETY: wc has num_entries writable entries; done + i < num_entries.
            unsafe { wc.add(done + i).write(IbvWc::from(w)) };
        }
        done += n;
        if n < chunk {
            break;
        }
    }
    done as i32
}

/// `ibv_context_ops.req_notify_cq`.
pub unsafe extern "C" fn sv_req_notify_cq(cq: *mut IbvCq, solicited_only: i32) -> i32 {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a CQ of ours with an open context.
    let (ctx, id) = unsafe {
        (
            SvContext::from_ptr((*cq).context).expect("open"),
            (*cq).handle,
        )
    };
    match ctx.backend().req_notify_cq(id, solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}
