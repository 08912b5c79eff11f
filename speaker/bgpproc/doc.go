// Package bgpproc runs the speaker's BGP side (package bgp: GoBGP and BFD) in a process of its
// own, so that a failure there (a panic in GoBGP's message handling, a deadlock, runaway
// memory) ends that process alone: the speaker keeps answering ARP/NDP, gets a new process and
// hands it the whole BGP plan again.
//
// Supervisor is the speaker's side: a speaker.Router that keeps the latest plan, gets a process
// when the plan first names a peer, pings it and gets another after it ends. Serve is the
// process's side. They talk over a unix stream socket, one gob stream each way: requests (a
// plan, close, ping, metrics) to the process, answers and session changes back, each carrying
// the process's session states at the time it was written.
//
// The process comes one of two ways:
//
//   - Its own container in the speaker's pod (Supervisor.Socket, the DaemonSet's way): the
//     kubelet starts it (and again after it ends), it connects to a socket the speaker listens on
//     in a volume both containers mount (Dial), and it starts afresh (exec) after each speaker.
//     Its memory is accounted apart from the speaker's: the container has a memory limit of its
//     own, which the kernel enforces, so a router flooding routes ends this container alone. On
//     cgroup v2 the kubelet sets memory.oom.group=1 on every container, which kills all of a
//     container's processes when one is killed for memory: the speaker and a child process of it
//     in one container would die together, whatever the child's oom_score_adj. A cgroup of the
//     speaker's own making for a child would need the cgroup filesystem writable in its
//     container, which the runtime mounts read-only for unprivileged containers: a container of
//     its own is the bound the kubelet already enforces. The speaker sees the process's PID
//     through the socket (SO_PEERCRED) only when the pod shares its PID namespace; otherwise a
//     stuck process is ended by closing its channel (a deadlocked one exits when it reads the
//     end; one frozen whole does not) and comes back through the kubelet.
//   - A child process of the speaker (Supervisor.Command, for a speaker run by hand or in the
//     lab): the speaker starts the binary again with one end of a socket pair as its file
//     descriptor 3, reads its memory with every ping and kills it above MemoryLimit, kills it
//     when it is stuck, and takes it along when it dies (PR_SET_PDEATHSIG).
package bgpproc
