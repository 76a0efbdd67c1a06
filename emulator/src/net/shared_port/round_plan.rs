//! What a probe round steers to, worked out from what the members published and answered
//! (see `member.rs`): the last round's indices, and the rules and the fallback of a
//! program while some members' sockets are about to close. Pure.

use super::registry::MemberInfo;
use super::steering;

/// What a probe round found: the members that answered (slot, index), the sockets of the
/// group (held slots) and how many of those are closing (members that handed over).
pub(super) struct Round {
    pub(super) members: Vec<(u8, u32)>,
    pub(super) sockets: usize,
    pub(super) closing: usize,
}

impl Round {
    /// A round that probed `probed` sockets (the members held at its start) and of whose
    /// members `staying` are held and have not handed over at its end, `members` of them
    /// answering. Every other socket it probed counts as closing, the ones gone during the
    /// round too: no member joins while a round holds the membership lock, so the group
    /// only shrinks, and each close moved the group's last socket into the closed one's
    /// index, perhaps after that member answered. Counted against the sockets at the
    /// round's end instead, the answer of a member moved that way named an index past the
    /// group's end, which the kernel's hash stood in for, and the hash could pick a socket
    /// about to close (seen: a server's ACK and READ response to a client, lost while two
    /// other clients exited).
    pub(super) fn settled(members: Vec<(u8, u32)>, probed: usize, staying: usize) -> Round {
        Round {
            members,
            sockets: probed,
            closing: probed.saturating_sub(staying),
        }
    }
}

/// Whether a member has handed over (it published so) and is about to close its socket.
pub(super) fn has_left(member: &(u8, Option<MemberInfo>)) -> bool {
    member.1.is_some_and(|info| info.left)
}

/// The rules of a program for `staying` members (slot, index) of a group of `sockets`
/// sockets of which `closing` are about to close (members that handed over, or the one
/// handing over). What names no member (QP1, gone slots) goes to the lowest index that
/// holds through every close (each close moves the group's last socket into the closed
/// one's index, so those below `sockets - closing` hold) rather than to the kernel's hash,
/// which could pick a closing socket. A member whose index a close will move:
/// - with one socket closing, keeps its rule: after the close its old index takes the
///   hash, which then has only staying sockets to pick from, until the re-probe that
///   follows the close (`member::State::leavers`);
/// - with more closing, gets none and is reached through the fallback member (forwarded):
///   after the first close the hash could pick another closing socket, where its
///   datagrams would die (seen: a server's READ response to a client still mid-exchange,
///   while two other clients exited, retransmitted 2 s later).
///
/// With nothing closing: every rule, the rest to the hash. Returns (rules, fallback).
pub(super) fn plan(staying: &[(u8, u32)], sockets: usize, closing: usize) -> (Vec<(u8, u32)>, u32) {
    if closing == 0 {
        return (staying.to_vec(), steering::ANY_MEMBER);
    }
    let holds_below = u32::try_from(sockets.saturating_sub(closing)).unwrap_or(u32::MAX);
    let holds = |&(_, index): &(u8, u32)| index < holds_below;
    let lowest = |members: &mut dyn Iterator<Item = &(u8, u32)>| members.map(|m| m.1).min();
    let fallback = lowest(&mut staying.iter().filter(|m| holds(m)))
        .or(lowest(&mut staying.iter()))
        .unwrap_or(steering::ANY_MEMBER);
    let rules = if closing == 1 {
        staying.to_vec()
    } else {
        staying
            .iter()
            .copied()
            .filter(|m| holds(m) || m.1 == fallback)
            .collect()
    };
    (rules, fallback)
}

/// The members (slot, index) the last probe round found among `members`: those whose
/// published index came from the newest round any of them answered.
pub(super) fn last_round(members: &[(u8, Option<MemberInfo>)]) -> Vec<(u8, u32)> {
    let found = || {
        members
            .iter()
            .filter_map(|&(slot, info)| info.and_then(|i| Some((slot, i.index?, i.generation))))
    };
    let newest = found().map(|(_, _, generation)| generation).max();
    found()
        .filter(|&(_, _, generation)| Some(generation) == newest)
        .map(|(slot, index, _)| (slot, index))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(index: Option<u32>, generation: u64) -> Option<MemberInfo> {
        Some(MemberInfo {
            pid: 1,
            index,
            generation,
            qps: 0,
            left: false,
        })
    }

    #[test]
    fn a_socket_gone_during_a_round_counts_as_closing() {
        // Four members at indices 0-3; the one at 0 closed during the round, after the one
        // at 3 answered: the kernel moved that one to index 0. The member at 2 hands over.
        let round = Round::settled(vec![(2, 1), (3, 2), (4, 3)], 4, 3);
        assert_eq!((round.sockets, round.closing), (4, 1));
        let others = [(2, 1), (4, 3)];
        let (rules, fallback) = plan(&others, round.sockets, round.closing + 1);
        assert_eq!(
            (rules, fallback),
            (vec![(2, 1)], 1),
            "slot 4's answer may be stale: it goes through index 1, which holds"
        );
    }

    #[test]
    fn the_last_round_is_the_indices_of_the_newest_generation_any_member_answered() {
        let members = [
            (1, info(Some(0), 7)),
            // Answered an older round only: its index may be stale.
            (2, info(Some(1), 6)),
            (3, info(Some(1), 7)),
            // Joined, not probed yet; and one whose slot file was unreadable.
            (4, info(None, 0)),
            (5, None),
        ];
        assert_eq!(last_round(&members), [(1, 0), (3, 1)]);
        assert_eq!(last_round(&members[3..]), []);
    }

    #[test]
    fn while_sockets_close_what_names_no_member_goes_to_an_index_that_holds() {
        // Nothing closing: the rest to the kernel's hash.
        assert_eq!(
            plan(&[(4, 0), (9, 2)], 2, 0),
            (vec![(4, 0), (9, 2)], steering::ANY_MEMBER)
        );
        // Four sockets, one (index 1) closing: slot 2 at index 3 will move into index 1
        // and keeps its rule until then; index 0 takes what names no member.
        let staying = [(9, 2), (2, 3), (4, 0)];
        assert_eq!(plan(&staying, 4, 1), (staying.to_vec(), 0));
        // Five sockets, two closing: only 0..3 hold; slot 2 at index 3 will move, and a
        // second close could leave its old index to a hash that picks the other closing
        // socket, so it goes through index 0 meanwhile.
        let staying = [(9, 2), (2, 3), (4, 0)];
        assert_eq!(plan(&staying, 5, 2), (vec![(9, 2), (4, 0)], 0));
        // Not the lowest staying index if a close will move it: only 0..2 hold of 5
        // sockets with 3 closing, and index 0 is a closing one's.
        let staying = [(9, 1), (2, 4)];
        assert_eq!(plan(&staying, 5, 3), (vec![(9, 1)], 1));
        assert_eq!(
            plan(&staying, 5, 4),
            (vec![(9, 1)], 1),
            "none holds: the lowest, which keeps its rule"
        );
        // Two members, the first leaving: the other will move into index 0; until then
        // everything goes to it where it is.
        assert_eq!(plan(&[(5, 1)], 2, 1), (vec![(5, 1)], 1));
    }
}
