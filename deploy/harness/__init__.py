"""Real HTCondor pools from `deploy/sandbox`, driven from Python: the sandbox itself
(`sandbox`), poold on sandbox pools (`federation`), faultd on a sandbox pool (`fault_pool`), and
the flock paper's four-pool experiment on them (`four_pools`). Tests, benchmarks and `make demo`
use it; the daemons never import it."""
