// jemalloc's settings for tlpd, compiled into the binary (jemalloc reads this symbol at start;
// MALLOC_CONF in the environment still overrides it).
//
// Why: training steps and scoring requests allocate tensors of a few MB and free them again.
// With jemalloc's default decay (freed pages go back to the kernel over 10 s, driven by
// allocator activity) a tight loop kept faulting in, and zeroing, pages it had just returned;
// longer finite decays (30 s) and a smaller oversize threshold did not change that. Keeping
// freed pages (decay off) removed ~98 % of the faults and doubled training speed on
// CollegeMsg; on a VM where a fault is expensive it is ~10x (docs/performance.md). What stays
// resident is bounded by the daemon instead: server/freed_memory_bound.h.
extern "C" {
// The name and type are jemalloc's interface.
extern const char* malloc_conf;
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
