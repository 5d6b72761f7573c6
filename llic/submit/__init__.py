"""HTCondor submit files, resolved into tasks the way `condor_submit` (23.9) resolves them.

Why this exists: `master_submitter` takes the user's own submit file and runs its jobs as llic
tasks, so every task must get exactly the executable, arguments, environment, files and
directory that `condor_submit` would have given the job. htcondor2's `Submit` keeps only the first
queue statement and cannot list per-job values, so this package reads submit files itself
(standard library only, but for ClassAd expressions: classad_values.py).

It follows HTCondor's own code (condor_utils/config.cpp, submit_utils.cpp, condor_submit.V6/
submit.cpp, condor_arglist.cpp, env.cpp at v23.9.6) and is checked against the real
`condor_submit -dry-run` by tests/llic/test_dryrun_condor.py. What it reads:

- lines: `#` comments, blank lines, continuation with a trailing `\\` (a `#` line inside a
  continuation counts as blank, a `#` line never continues), leading/trailing white space trimmed;
- `name = value` with case-insensitive names (macro references in a name are expanded),
  `+Attr = value` / `MY.Attr = value` (stored as `MY.Attr`), `-Attr =`, `name @= TAG` ... `@TAG`;
- `if`/`elif`/`else`/`endif` (conditionals.py: numbers, booleans, `defined X`, `version >= X.Y`),
  `include : FILE`, `include : CMD |`, `include [ifexist] command|output [into FILE] : CMD`
  (sources.py), `warning :`, `error :`;
- macros, expanded lazily when a value is used (as condor does): `$(X)`, `$(X:default)` (the
  default when X is undefined or empty), `$(DOLLAR)`, `$$(X)` left for HTCondor, `$ENV(X)`
  (`UNDEFINED` when unset, `$ENV(X:default)`), `$Fpdnxbqaf(X)` (`f`: a full path, relative to
  the job's initialdir), `$BASENAME(X)`, `$DIRNAME(X)`, `$SUBSTR(X,start[,len])`,
  `$CHOICE(i,list)`, `$INT(X[,fmt])`, `$REAL(X[,fmt])`, `$EVAL(X)`, `$STRING(X[,fmt])`; a self
  reference (`X = $(X) more`) is expanded when the line is read;
- the built-in macros `$(Process)`/`$(ProcId)`, `$(Cluster)`/`$(ClusterId)`, `$(JobId)`,
  `$(Item)` and the other queue variables, `$(ItemIndex)`/`$(Row)`, `$(Step)`, `$(Node)`,
  `$(SUBMIT_FILE)`, `$(SUBMIT_TIME)`, `$(Year)`/`$(Month)`/`$(Day)`, `$(ARCH)`, `$(OPSYS)`,
  `$(IsLinux)`, `$(IsWindows)`;
- every queue form: `queue`, `queue N`, `queue [N] [VARS] in|from|matching [files|dirs|any]
  [slice] (items)`, items on the line, in a `( ... )` block over several lines, `from FILE` or
  `from CMD |`; N is an integer expression; several variables per item split as condor_submit
  does (at the first `,`, space or tab; the last variable takes the rest; a variable an item
  has no field for keeps its previous value); a variable named like a submit command (`queue
  input in (a, b)`) is that command for each job; `matching` globs relative to the working
  directory (directories get a trailing `/`, duplicates across patterns are dropped);
- `executable` (absolute: relative to the working directory unless `transfer_executable = false`),
  `arguments` (new syntax in double quotes with `''`/`""` escapes and single-quote grouping, old
  syntax with `\\"`), `arguments2`, `environment`/`env` (new syntax, or old `;`-separated with an
  optional leading delimiter), `environment2`, `getenv` (true, or a list of names with `*` and
  `!`), `input`/`output`/`error` (and `stdin`/`stdout`/`stderr`), `initialdir` (relative to the
  working directory), `transfer_input_files`, `transfer_output_files`, `should_transfer_files`
  and `when_to_transfer_output` (condor's words for them, `true`/`ALWAYS`... included),
  `universe` (vanilla only); every other command is in commands.py's table: what llic does with
  it (resolves it, honours it in the master, gives it to the agent job, ignores it and why, or
  refuses it and why).

The working directory (`cwd`) plays the part of condor_submit's current directory: `initialdir`,
a relative `executable`, `queue ... from FILE` and `queue ... matching` are relative to it (not
to the submit file's directory, as condor_submit does too). `master_submitter` passes its own
current directory.

condor_submit behaviours reproduced on purpose, because they change what a job gets:
- several queue statements form one cluster and process numbers continue, until the raw
  `executable` changes: then a new cluster starts and process numbers restart at 0;
- a job whose `input`/`output`/`error`/`arguments`/`transfer_input_files`/
  `transfer_output_files`/`executable` expands to nothing takes the value of the first job of
  the submission (its "cluster ad"; each new cluster's first job updates it), and a job's
  `environment` is merged over that first job's environment;
- after a queue statement with variables, those variables are `<Queue_item>` for later ones;
- `initialdir` must be a directory and a transferred executable must exist (condor_submit refuses
  the submission otherwise); input files are not checked (condor_submit 23.9 skips that check).

Rejected with a SubmitFileError (condor_submit knows them, llic cannot honour them): `use`
(configuration templates), `queue ... from -`, `$RANDOM_CHOICE()`, `$RANDOM_INTEGER()` (a
master would draw other values), `$(OPSYSVER)` and the other macros that come from the submit machine's
HTCondor configuration, universes other than vanilla, `container_image`/`docker_image` (condor
makes those container jobs whatever the universe), environment entries without `=`, negative
slice steps, and the commands commands.py refuses. What condor_submit reads as a ClassAd
expression (`hold = $(Process) == 0`, `max_retries = 2.7`) is read with HTCondor's ClassAd
library, imported only for such values (classad_values.py). Deviations kept on purpose, each
rarer than rare: `$Ff()` in `initialdir` itself and in lines read before the first job is made
is taken as it is (condor uses the previous job's initialdir there), and `if version` compares
with 23.9.6, the condor_submit llic reproduces, not with the submit host's HTCondor.

The modules follow the language's layers, from the lines up:

- values.py: condor's readings of a plain value (boolean, integer expression, list);
- lines.py: physical lines into logical ones (continuations, comments);
- classad_values.py: what condor reads as a ClassAd expression (booleans, integers, expressions);
- macros.py, macro_functions.py: the macro table, `$(...)` expansion, built-in macros, and the
  functions `$ENV()`, `$F...()`, `$INT()`... (a new function: macro_functions.FUNCTIONS);
- conditionals.py: `if`/`elif`/`else`/`endif`; sources.py: included files and commands, and
  `queue ... from CMD |`;
- arguments.py, environment.py: the old and new syntax of `arguments` and `environment`;
- queue.py: queue statement forms and their item sources (a new source such as `from CMD |`:
  queue._read_item_source);
- resolve.py: one job's values from the commands it sees (a new command that changes a job);
- block.py: QueueBlock, one queue statement with its commands, items and numbered jobs;
- parser.py: the file: commands, directives (`if`, `include`...: parser._Parser._line), queue
  statements, numbering, errors with file:line;
- commands.py: every submit command condor_submit knows, and what llic does with it;
- what llic needs beyond condor_submit's resolution: dispatch.py (Mode, agent attributes, common
  input files) and master_copy.py (the self-contained text a master is given);
- errors.py: SubmitFileError. A resolved job is llic/task.py's Task (the one task record of
  llic, with `attempt` 0), re-exported here as TaskSpec.
"""

from llic.submit.arguments import parse_arguments, split_args
from llic.submit.block import QueueBlock
from llic.submit.environment import parse_environment, parse_v1_environment, parse_v2_environment
from llic.submit.errors import SubmitFileError
from llic.submit.parser import SubmitFile, parse_submit_file, parse_submit_text
from llic.task import Mode, Task

TaskSpec = Task  # the one task record (llic/task.py), as the parser resolves each job: attempt 0

__all__ = [
    "Mode",
    "QueueBlock",
    "SubmitFile",
    "SubmitFileError",
    "TaskSpec",
    "parse_arguments",
    "parse_environment",
    "parse_submit_file",
    "parse_submit_text",
    "parse_v1_environment",
    "parse_v2_environment",
    "split_args",
]
