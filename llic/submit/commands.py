"""Every submit command condor_submit 23.9 knows, and what llic does with it: no command is
dropped without a word.

- RESOLVED: part of each task as condor_submit resolves it (resolve.py): what runs, where, with
  which arguments, environment and files;
- MASTER: honoured by the master for each task: the job event log, retries and the exit and
  periodic policies, holding on submission, output remaps (llic/task.py carries them, the
  master's policy and event log act on them);
- AGENT: given to the agent jobs, which carry the user's requirements to the slots they run on;
  one agent runs many tasks, so the value must be the same for every task (dispatch.py);
- IGNORED: harmless for llic, with the reason;
- REFUSED: it would change what a job does and llic cannot honour it: the file is refused with
  file:line and the reason.

Some commands are refused only for some values (`log_xml = true`, `transfer_output = false`,
`when_to_transfer_output = ON_SUCCESS`), and condor's checks of a value's type (a boolean, an
integer, an expression; `hold = maybe`, `max_retries = x`) are repeated, so that a file
condor_submit refuses is refused here too. A name this table does not know is a macro of the
user's (condor_submit only warns that it is unused). The table's content comes from
submit_utils.h/.cpp of 23.9.6 (SUBMIT_KEY_*, SUBMIT_CMD_*, the prunable keyword table with its
types); tests/llic/test_submit_commands.py checks it against the behaviour of each group.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llic.submit.classad_values import expression_error, submit_bool, submit_integer
from llic.submit.resolve import when_value

if TYPE_CHECKING:
    from llic.submit.block import QueueBlock
    from llic.submit.resolve import JobCommands


class Handling(enum.Enum):
    """What llic does with a command (see the module's doc)."""

    RESOLVED = "resolved into each task"
    MASTER = "honoured by the master"
    AGENT = "given to the agent jobs"
    IGNORED = "ignored"
    REFUSED = "refused"


Check = Callable[[str], "str | None"]  # an expanded value -> why llic refuses it (None: accepted)


@dataclass(frozen=True)
class Command:
    """One command: what llic does with it, why (for IGNORED and REFUSED), the type condor
    checks its value against ("bool", "int", "uint", "expr" or ""), and for commands refused
    only for some values, the check that decides."""

    name: str
    handling: Handling
    why: str = ""
    kind: str = ""
    refuse_if: Check | None = None
    refused_for: str = ""  # which values refuse_if refuses, for the documentation


def _table() -> dict[str, Command]:
    table: dict[str, Command] = {}

    def add(
        handling: Handling,
        names: str,
        why: str = "",
        kind: str = "",
        refuse_if: Check | None = None,
        refused_for: str = "",
    ) -> None:
        for name in names.split():
            kind_of = kind
            if ":" in name:
                name, kind_of = name.split(":")
            table[name.lower()] = Command(name, handling, why, kind_of, refuse_if, refused_for)

    add(
        Handling.RESOLVED,
        "executable cmd arguments args arguments2 allow_arguments_v1:bool environment env environment2 "
        "allow_environment_v1:bool getenv get_env input stdin output stdout error stderr initialdir "
        "initial_dir job_iwd iwd transfer_input_files transferinputfiles "
        "should_transfer_files shouldtransferfiles transfer_executable universe jobuniverse",
    )
    add(
        Handling.RESOLVED,
        "transfer_output_files transferoutputfiles",
        "unset, llic returns the new and changed files but never writes over a task's inputs, "
        "executable, log, stdout or stderr (they feed other tasks, and an agent may lie): list a "
        "changed input to get it back",
    )
    add(
        Handling.RESOLVED,
        "when_to_transfer_output whentotransferoutput",
        refuse_if=lambda v: (
            None
            if when_value(v) != "ON_SUCCESS"
            else "llic returns a task's output files whatever its exit code"
        ),
        refused_for="ON_SUCCESS (and IF_NEEDED or AUTO, which condor_submit 23.9 reads as ON_SUCCESS)",
    )
    add(
        Handling.MASTER,
        "log:  max_retries:int success_exit_code:int retry_until:expr on_exit_remove:expr "
        "on_exit_hold:expr on_exit_hold_reason:expr on_exit_hold_subcode:expr periodic_remove:expr "
        "periodic_hold:expr periodic_hold_reason:expr periodic_hold_subcode:expr "
        "periodic_release:expr hold:bool transfer_output_remaps submit_event_notes userlog:",
    )
    add(
        Handling.MASTER,
        "onexitremove:expr onexithold:expr onexitholdreason:expr onexitholdsubcode:expr "
        "periodicremove:expr periodichold:expr periodicholdreason:expr periodicholdsubcode:expr "
        "periodicrelease:expr jobmaxretries:int jobsuccessexitcode:int transferoutputremaps "
        "submiteventnotes",
    )
    add(
        Handling.AGENT,
        "requirements:expr rank:expr preferences:expr request_cpus request_memory "
        "request_disk request_gpus gpus_minimum_capability:expr "
        "gpus_maximum_capability:expr gpus_minimum_memory:expr gpus_minimum_runtime:expr "
        "cuda_version concurrency_limits concurrency_limits_expr:expr accounting_group "
        "accounting_group_user nice_user:bool priority:int prio:int job_machine_attrs "
        "job_machine_attrs_history_length:int",
    )
    add(Handling.IGNORED, "notification notify_user email_attributes", "llic sends no e-mail")
    add(
        Handling.IGNORED,
        "batch_name batch_id description jobset job_ad_information_attrs ulog_execute_attrs "
        "submit_event_user_notes match_list_length:int dag_node_name",
        "labels and bookkeeping of the HTCondor queue; llic's tasks are not in it",
    )
    add(
        Handling.IGNORED,
        "image_size:int disk_usage memory_usage",
        "estimates for matchmaking; the agent jobs' request_* decide where tasks run",
    )
    add(
        Handling.IGNORED,
        "job_lease_duration:expr keep_claim_idle:expr job_max_vacate_time:expr "
        "max_job_retirement_time:expr want_graceful_removal:expr kill_sig remove_kill_sig "
        "hold_kill_sig kill_sig_timeout:int erase_output_and_error_on_restart:bool",
        "about claims, vacating and evicting jobs; llic never vacates or evicts a task (a task "
        "it removes or holds while running is killed)",
    )
    add(
        Handling.IGNORED,
        "max_idle:expr materialize_max_idle:expr max_materialize next_job_start_delay:expr "
        "leave_in_queue:expr copy_to_spool",
        "how the schedd paces and keeps jobs; llic's master starts tasks at its own pace and keeps "
        "every task in its state file",
    )
    add(Handling.IGNORED, "cluster process", "condor_submit's own macros, set for each job")
    add(Handling.IGNORED, "want_ads", "condor_submit 23.9 reads it nowhere")
    add(
        Handling.IGNORED,
        "skip_filechecks:bool",
        "condor_submit 23.9 checks the executable and initialdir anyway, and so does llic",
    )
    add(
        Handling.IGNORED,
        "stream_output:bool stream_error:bool",
        "streaming changes only when stdout/stderr appear on the submit machine; llic returns "
        "them when the task ends",
    )
    add(
        Handling.REFUSED,
        "stream_input:bool",
        "llic sends a task's input file when it starts and cannot stream it",
        refuse_if=lambda v: None if submit_bool(v) is not True else "llic cannot stream the input file",
        refused_for="true",
    )
    add(
        Handling.RESOLVED,
        "transfer_input:bool",
        refuse_if=lambda v: (
            None if submit_bool(v) is not False else "llic sends a task's input file with it (TRANSFER modes)"
        ),
        refused_for="false",
    )
    add(
        Handling.RESOLVED,
        "transfer_output:bool transfer_error:bool",
        refuse_if=lambda v: (
            None if submit_bool(v) is not False else "llic always returns a task's stdout and stderr"
        ),
        refused_for="false",
    )
    add(
        Handling.MASTER,
        "log_xml:bool",
        refuse_if=lambda v: (
            None
            if submit_bool(v) is not True
            else "llic writes the job event log in HTCondor's text form, not XML"
        ),
        refused_for="true",
    )
    add(
        Handling.RESOLVED,
        "preserve_relative_paths:bool",
        refuse_if=lambda v: (
            None
            if submit_bool(v) is not True
            else "llic places transferred files by their base names, as condor does by default"
        ),
        refused_for="true",
    )
    add(Handling.REFUSED, "dagman_log dagman_job_id:uint", "llic does not write DAGMan's node log")
    add(
        Handling.REFUSED,
        "periodic_vacate:expr allowed_job_duration:expr allowed_execute_duration:expr",
        "llic neither vacates tasks nor times their runs",
    )
    add(
        Handling.REFUSED,
        "deferral_time:int deferral_window:int deferral_prep_time:int cron_window:int "
        "cron_prep_time:int crontab cron_minute cron_hour cron_day_of_month cron_month "
        "cron_day_of_week",
        "llic starts tasks as soon as it can; it cannot defer them",
    )
    add(
        Handling.REFUSED,
        "x509userproxy use_x509userproxy:bool delegate_job_gsi_credentials_lifetime:int "
        "use_oauth_services useoauthservices use_scitokens:bool use_scitoken:bool scitokens_file "
        "send_credential",
        "llic cannot hand a credential to each task",
    )
    add(
        Handling.REFUSED,
        "output_destination transfer_plugins public_input_files checkpoint_exit_code:int "
        "checkpoint_destination transfer_checkpoint_files manifest:bool manifest_dir "
        "encrypt_input_files encrypt_output_files dont_encrypt_input_files dont_encrypt_output_files "
        "encrypt_execute_directory:bool max_transfer_input_mb:expr max_transfer_output_mb:expr "
        "file_remaps:expr buffer_files:expr buffer_size:expr buffer_block_size:expr fetch_files "
        "compress_files append_files local_files aws_access_key_id_file aws_secret_access_key_file "
        "aws_region s3_access_key_id_file s3_secret_access_key_file gs_access_key_id_file "
        "gs_secret_access_key_file",
        "llic moves a task's files itself and has none of HTCondor's file transfer options",
    )
    add(
        Handling.REFUSED,
        "core_size:int coresize stack_size:expr run_as_owner:bool load_profile:bool "
        "suspend_job_at_exec:bool starter_debug starter_log want_io_proxy:bool want_remote_io "
        "tool_daemon_cmd tool_daemon_input tool_daemon_output tool_daemon_error tool_daemon_arguments "
        "tool_daemon_args tool_daemon_arguments2 noop_job:expr noop_job_exit_code:expr "
        "noop_job_exit_signal:expr skip_if_dataflow:bool exit_requirements",
        "it changes how HTCondor's starter runs the job, which llic's agent does not do",
    )
    add(
        Handling.REFUSED,
        "container_image docker_image container_service_names container_target_dir transfer_container "
        "_container_port "
        "docker_network_type docker_pull_policy docker_override_entrypoint:bool",
        "a container job (condor makes one of it whatever the universe); llic runs vanilla jobs only",
    )
    add(
        Handling.REFUSED,
        "machine_count:int node_count:int nodecount:int wantparallelscheduling:bool "
        "parallel_script_shadow parallel_script_starter rendezvousdir jar_files java_vm_args "
        "java_vm_arguments java_vm_arguments2 vm_type vm_memory vm_vcpus vm_disk vm_checkpoint "
        "vm_networking vm_networking_type vm_vnc vm_macaddr vm_no_output_vm xen_kernel xen_initrd "
        "xen_root xen_kernel_params interactive interactive_args interactive_executable "
        "interactive_exectuable wantnametag "
        "grid_resource arc_rte arc_resources arc_application batch_extra_submit_args batch_project "
        "batch_queue batch_runtime remote_initialdir ec2_access_key_id ec2_secret_access_key "
        "ec2_keypair ec2_keyp_air ec2_keypair_file ec2_key_pair_file ec2_security_groups "
        "ec2_security_ids ec2_ami_id ec2_instance_type ec2_vpc_subnet ec2_vpc_ip ec2_elastic_ip "
        "ec2_availability_zone ec2_ebs_volumes ec2_spot_price ec2_block_device_mapping ec2_user_data "
        "ec2_user_data_file ec2_iam_profile_arn ec2_iam_profile_name ec2_parameter_names "
        "ec2_tag_names gce_auth_file gce_account gce_image gce_machine_type gce_metadata "
        "gce_metadata_file gce_preemptible gce_json_file azure_auth_file azure_image azure_location "
        "azure_size azure_admin_username azure_admin_key",
        "a command of another universe; llic runs vanilla jobs only",
    )
    return table


COMMANDS: dict[str, Command] = _table()
"""Every command by lower-case name."""

# families of commands named by a prefix (condor's request_<resource>, cloud labels...)
_PREFIXES = (
    ("request_", Command("request_*", Handling.AGENT)),
    ("require_", Command("require_*", Handling.AGENT)),
    ("cloud_label_", Command("cloud_label_*", Handling.REFUSED, "a cloud (grid universe) command")),
    ("ec2_tag_", Command("ec2_tag_*", Handling.REFUSED, "a cloud (grid universe) command")),
    ("ec2_parameter_", Command("ec2_parameter_*", Handling.REFUSED, "a cloud (grid universe) command")),
    ("remote_", Command("remote_*", Handling.REFUSED, "a grid universe command")),
)
_OAUTH_RE = re.compile(r".+_oauth_(permissions|resource)(_.*)?$")
_MY_REFUSED = {
    "my.wantcontainer": "a container job; llic runs vanilla jobs only",
    "my.wantdocker": "a container job; llic runs vanilla jobs only",
    "my.containerimage": "a container job; llic runs vanilla jobs only",
    "my.dockerimage": "a container job; llic runs vanilla jobs only",
    "my.wantparallelscheduling": "a parallel job; llic runs vanilla jobs only",
}


def command(name: str) -> Command | None:
    """What llic does with the command `name` (any case); None for a name condor_submit does
    not know (a macro of the user's). `+Attr`/`MY.Attr` job attributes go to the agent jobs."""
    low = name.lower()
    found = COMMANDS.get(low)
    if found is not None:
        return found
    if low.startswith("my."):
        why = _MY_REFUSED.get(low)
        return Command(name, Handling.REFUSED, why) if why else Command(name, Handling.AGENT)
    for prefix, family in _PREFIXES:
        if low.startswith(prefix):
            return family
    if _OAUTH_RE.match(low):
        return Command(name, Handling.REFUSED, "llic cannot hand a credential to each task")
    return None


# ---------------------------------------------------------------------------------------------
# the check of one queue block


def check_commands(block: QueueBlock) -> None:
    """Refuse the block (SubmitFileError at the command's line) when a command in effect is
    refused, or its value is of a type condor_submit refuses, or one llic cannot honour. A
    value is checked for the first job, and for every job when it holds a macro."""
    jobs = block.jobs(1 + block.cluster_offset)
    first = next(jobs, None)
    if first is None:
        return
    _, job = first
    names = list(block.macros) + [v.lower() for v in block.variables]
    checks = []
    for low in dict.fromkeys(names):
        found = command(low)
        if found is None:
            continue
        value, _ = job.param(low)
        if found.handling is Handling.REFUSED and found.refuse_if is None:
            if value is None:
                continue  # set to nothing: as if not set
            raise job.fail(f"{_spelled(block, low)}: {found.why} (not supported by llic)", low)
        checks.append((low, found))
        _check_value(job, low, found, value, block)
    variable = [
        (low, found)
        for low, found in checks
        if (found.kind or found.refuse_if is not None or low == "notification" or _is_expression(low, found))
        and "$" in (block.macros[low].value if low in block.macros else "$")
    ]
    if not variable:
        return
    seen: set[tuple[str, str | None]] = set()
    for _, job in jobs:
        for low, found in variable:
            value, _ = job.param(low)
            if (low, value) not in seen:
                seen.add((low, value))
                _check_value(job, low, found, value, block)


def ignored_commands(block: QueueBlock) -> list[str]:
    """Notes on the commands in effect that llic ignores (with why), for master_submitter to print."""
    notes = []
    for low, m in block.macros.items():
        found = command(low)
        if found is not None and found.handling is Handling.IGNORED and m.value.strip():
            notes.append(f"{block.path}:{m.line}: {m.name} is ignored: {found.why}")
    return notes


def _spelled(block: QueueBlock, low: str) -> str:
    m = block.macros.get(low)
    return m.name if m is not None else low


# The longest ClassAd expression llic takes (a real one is some hundred characters): the master's
# classad library parses a long one recursively, and `1+1+...` of 500,000 terms crashed it
# (a segmentation fault) where condor_submit --dry-run took it.
MAX_EXPRESSION_CHARS = 64 << 10
SHOWN_VALUE_CHARS = 200  # of a refused value, in its error (a 20 KB expression made a 20 KB line)


def _is_expression(low: str, found: Command) -> bool:
    """A value the master parses as a ClassAd expression: a policy, `requirements`, a job attribute."""
    return found.kind == "expr" or low.startswith("my.")


def _check_value(job: JobCommands, low: str, found: Command, value: str | None, block: QueueBlock) -> None:
    if value is None:
        return
    name = _spelled(block, low)
    problem = None
    shown = value if len(value) <= SHOWN_VALUE_CHARS else f"{value[:SHOWN_VALUE_CHARS]}..."
    if _is_expression(low, found) and len(value) > MAX_EXPRESSION_CHARS:
        problem = (
            f"{name}: an expression of {len(value)} characters, more than the {MAX_EXPRESSION_CHARS} allowed"
        )
    elif found.kind == "bool" and submit_bool(value) is None:
        problem = f"{name}={shown} is invalid, must eval to a boolean."
    elif found.kind in ("int", "uint"):
        number = submit_integer(value)
        if number is None:
            problem = f"{name}={shown} is invalid, must eval to an integer."
        elif found.kind == "uint" and number < 0:
            problem = f"{name}={shown} is invalid, must eval to a non-negative integer."
    elif found.kind == "expr" and expression_error(value) is not None:
        problem = f"{name}={shown}: Parse error in expression"
    if (
        problem is None
        and low == "notification"
        and value.lower() not in ("never", "always", "complete", "error")
    ):
        problem = "Notification must be 'Never', 'Always', 'Complete', or 'Error'"
    if problem is None and found.refuse_if is not None:
        why = found.refuse_if(value)
        if why is not None:
            problem = f"{name} = {shown}: {why} (not supported by llic)"
    if problem is not None:
        raise job.fail(problem, low)


def _why(c: Command) -> str:
    if c.refuse_if is not None:
        reason = c.refuse_if("ON_SUCCESS" if "ON_SUCCESS" in c.refused_for else c.refused_for)
        return f"refused when {c.refused_for}: {reason}"
    return c.why


def table_rows() -> list[tuple[str, str, str]]:
    """(command, handling, why) for every command, sorted: the table as documentation prints it."""
    rows = [(c.name, c.handling.value, _why(c)) for c in COMMANDS.values()]
    rows += [(family.name, family.handling.value, family.why) for _, family in _PREFIXES]
    rows += [("<service>_oauth_*", Handling.REFUSED.value, "llic cannot hand a credential to each task")]
    rows += [(name, Handling.REFUSED.value, why) for name, why in _MY_REFUSED.items()]
    rows += [("+Attr / MY.Attr (any other)", Handling.AGENT.value, "")]
    return sorted(rows, key=lambda r: r[0].lower())


def markdown_table() -> str:
    """docs/llic-submit-commands.md: every command grouped by what llic does with it."""
    order = [h.value for h in Handling]
    lines = [
        "# What llic does with each submit command",
        "",
        "Generated from `llic/submit/commands.py` (`python -c 'from llic.submit.commands import *;",
        'print(markdown_table(), end="")\'`); tests/llic/test_submit_commands.py checks',
        "that it is current. Every submit command of HTCondor 23.9's `submit_utils.h` is here; a name",
        "that is none of them is a macro of the user's. A refused command refuses the whole file, naming",
        "its line; `hold`, `log_xml`, `transfer_output`... are refused only for the values said.",
        "",
    ]
    for handling in order:
        rows = [r for r in table_rows() if r[1] == handling]
        lines += [
            f"## {handling[0].upper()}{handling[1:]} ({len(rows)})",
            "",
            "| command | why |",
            "|---|---|",
        ]
        for name, _, why in rows:
            lines.append(f"| `{name}` | {why} |")
        lines.append("")
    return "\n".join(lines)
