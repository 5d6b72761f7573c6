"""llic.submit.commands: every command condor_submit 23.9 knows has a row in llic's table, and
each kind of row behaves as it says: resolved and master commands are accepted, agent commands
reach the agent job, ignored ones are accepted, refused ones are refused at their line with the
reason, and condor's checks of a value's type are made too."""

from __future__ import annotations

import random
import re
from pathlib import Path

import classad2
import pytest

from llic.submit import SubmitFile, SubmitFileError, parse_submit_file
from llic.submit.classad_syntax import is_simple_expression
from llic.submit.commands import COMMANDS, Handling, command, markdown_table, table_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "llic-submit-commands.md"

# Every SUBMIT_KEY_* and SUBMIT_CMD_* name of HTCondor 23.9.6's submit_utils.h (lower case).
CONDOR_SUBMIT_KEYWORDS = """
_container_port accounting_group accounting_group_user allow_arguments_v1 allow_environment_v1
allowed_execute_duration allowed_job_duration append_files arc_application arc_resources arc_rte
arguments arguments2 aws_access_key_id_file aws_region aws_secret_access_key_file azure_admin_key
azure_admin_username azure_auth_file azure_image azure_location azure_size batch_extra_submit_args
batch_id batch_name batch_project batch_queue batch_runtime buffer_block_size buffer_files
buffer_size checkpoint_destination checkpoint_exit_code cloud_label_ cloud_label_names cluster
compress_files concurrency_limits concurrency_limits_expr container_image container_service_names
container_target_dir copy_to_spool core_size cron_day_of_month cron_day_of_week cron_hour
cron_minute cron_month cron_prep_time cron_window cuda_version dagman_job_id dagman_log
deferral_prep_time deferral_time deferral_window delegate_job_gsi_credentials_lifetime description
disk_usage docker_image docker_network_type docker_override_entrypoint docker_pull_policy
dont_encrypt_input_files dont_encrypt_output_files ec2_access_key_id ec2_ami_id
ec2_availability_zone ec2_block_device_mapping ec2_ebs_volumes ec2_elastic_ip ec2_iam_profile_arn
ec2_iam_profile_name ec2_instance_type ec2_key_pair_file ec2_keyp_air ec2_keypair ec2_keypair_file
ec2_parameter_ ec2_parameter_names ec2_secret_access_key ec2_security_groups ec2_security_ids
ec2_spot_price ec2_tag_ ec2_tag_names ec2_user_data ec2_user_data_file ec2_vpc_ip ec2_vpc_subnet
email_attributes encrypt_execute_directory encrypt_input_files encrypt_output_files env environment
environment2 erase_output_and_error_on_restart error executable exit_requirements fetch_files
file_remaps gce_account gce_auth_file gce_image gce_json_file gce_machine_type gce_metadata
gce_metadata_file gce_preemptible get_env getenv gpus_maximum_capability gpus_minimum_capability
gpus_minimum_memory gpus_minimum_runtime grid_resource gs_access_key_id_file
gs_secret_access_key_file hold hold_kill_sig image_size initial_dir initialdir input
interactive_args interactive_exectuable jar_files java_vm_args java_vm_arguments
java_vm_arguments2 job_ad_information_attrs job_iwd job_lease_duration job_machine_attrs
job_machine_attrs_history_length job_max_vacate_time jobset keep_claim_idle kill_sig
kill_sig_timeout leave_in_queue load_profile local_files log log_xml machine_count manifest
manifest_dir match_list_length materialize_max_idle max_idle max_job_retirement_time
max_materialize max_retries max_transfer_input_mb max_transfer_output_mb memory_usage
next_job_start_delay nice_user node_count nodecount noop_job noop_job_exit_code
noop_job_exit_signal notification notify_user on_exit_hold on_exit_hold_reason
on_exit_hold_subcode on_exit_remove output output_destination parallel_script_shadow
parallel_script_starter periodic_hold periodic_hold_reason periodic_hold_subcode periodic_release
periodic_remove periodic_vacate preferences preserve_relative_paths prio priority process
public_input_files rank remote_ remote_initialdir remove_kill_sig rendezvousdir request_
request_cpus request_disk request_gpus request_memory require_ require_gpus requirements
retry_until run_as_owner s3_access_key_id_file s3_secret_access_key_file scitokens_file
send_credential should_transfer_files skip_filechecks skip_if_dataflow stack_size starter_debug
starter_log stderr stdin stdout stream_error stream_input stream_output submit_event_notes
submit_event_user_notes success_exit_code suspend_job_at_exec tool_daemon_args
tool_daemon_arguments tool_daemon_arguments2 tool_daemon_cmd tool_daemon_error tool_daemon_input
tool_daemon_output transfer_checkpoint_files transfer_container transfer_error transfer_executable
transfer_input transfer_input_files transfer_output transfer_output_files transfer_output_remaps
transfer_plugins transferinputfiles transferoutputfiles ulog_execute_attrs universe
use_oauth_services use_scitoken use_scitokens use_x509userproxy useoauthservices vm_checkpoint
vm_disk vm_macaddr vm_memory vm_networking vm_networking_type vm_no_output_vm vm_type vm_vcpus
vm_vnc want_ads want_graceful_removal want_io_proxy wantnametag when_to_transfer_output
x509userproxy xen_initrd xen_kernel xen_kernel_params xen_root
""".split()


def parse(tmp_path: Path, text: str) -> SubmitFile:
    (tmp_path / "job.sub").write_text(text)
    return parse_submit_file("job.sub", cwd=tmp_path, environ={})


def refused(tmp_path: Path, line: str) -> SubmitFileError:
    with pytest.raises(SubmitFileError) as info:
        parse(tmp_path, f"executable = /bin/echo\n{line}\nqueue\n").tasks(1)
    return info.value


def test_every_condor_submit_keyword_has_a_row() -> None:
    assert len(CONDOR_SUBMIT_KEYWORDS) == 270
    missing = [name for name in CONDOR_SUBMIT_KEYWORDS if command(name) is None]
    assert missing == []
    assert command("my_own_macro") is None  # a user's macro, no command
    assert all(why for _, handling, why in table_rows() if handling in ("ignored", "refused") and why)
    ignored_or_refused = [c for c in COMMANDS.values() if c.handling in (Handling.IGNORED, Handling.REFUSED)]
    assert all(c.why for c in ignored_or_refused)
    assert all(c.refused_for for c in COMMANDS.values() if c.refuse_if is not None)


def test_the_documented_table_is_current() -> None:
    assert DOC.read_text() == markdown_table(), (
        "regenerate docs/llic-submit-commands.md (its header says how)"
    )


@pytest.mark.parametrize(
    "line",
    [
        "log = job.log",
        "max_retries = 2",
        "success_exit_code = 3",
        "retry_until = ExitCode == 7",
        "on_exit_remove = ExitCode =?= 0",
        'on_exit_hold = ExitCode =!= 0\non_exit_hold_reason = "bad"\non_exit_hold_subcode = 7',
        "periodic_remove = JobStatus == 5 && time() - EnteredCurrentStatus > 60",
        "periodic_hold = NumJobStarts > 3\nperiodic_release = true",
        "hold = $(Process) == 0",
        'transfer_output_remaps = "out.txt = results/out.$(Process)"',
        "log_xml = false",
        "transfer_output = true",
        "transfer_input = true\nstream_input = false",
        "when_to_transfer_output = ON_EXIT_OR_EVICT\nshould_transfer_files = YES",
        "notification = Never\nnotify_user = me@example.org",
        "batch_name = run1\ndescription = test",
        "image_size = 1000",
        "job_lease_duration = 3600\nkill_sig = SIGTERM",
        "max_idle = 100\nleave_in_queue = false",
        "skip_filechecks = true",
        "stream_output = true",
        "request_memory = 2 GB\nrequest_cpus = 1",
    ],
)
def test_honoured_and_ignored_commands_are_accepted(tmp_path: Path, line: str) -> None:
    sub = parse(tmp_path, f"executable = /bin/echo\n{line}\nqueue 2\n")
    assert len(sub.tasks(1)) == 2


def test_agent_commands_reach_the_agent_job(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        "executable = /bin/echo\nrequirements = Memory > 100\nrank = Mips\nrequest_memory = 2 GB\n"
        "request_gpus = 1\ngpus_minimum_memory = 4000\ncuda_version = 11\nnice_user = true\n"
        'priority = 5\naccounting_group = g\n+Project = "p"\nnotification = never\nlog = x.log\nqueue\n',
    )
    attributes = sub.blocks[0].agent_attributes()
    assert attributes == {
        "requirements": "Memory > 100",
        "rank": "Mips",
        "request_memory": "2 GB",
        "request_gpus": "1",
        "gpus_minimum_memory": "4000",
        "cuda_version": "11",
        "nice_user": "true",
        "priority": "5",
        "accounting_group": "g",
        "MY.Project": '"p"',
    }


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("container_image = debian.sif", "a container job"),
        ("universe = vanilla\ndocker_image = debian", "a container job"),
        ("+WantContainer = true", "a container job"),
        ("x509userproxy = /tmp/x509up_u1000", "credential"),
        ("use_oauth_services = box", "credential"),
        ("use_x509userproxy = true", "credential"),
        ("box_oauth_permissions = read", "credential"),
        ("deferral_time = 100", "defer"),
        ("periodic_vacate = true", "vacates"),
        ("allowed_job_duration = 3600", "times"),
        ("transfer_plugins = x=/bin/x", "file transfer options"),
        ("output_destination = osdf:///x", "file transfer options"),
        ("coresize = 10", "starter"),
        ("machine_count = 2", "another universe"),
        ("grid_resource = batch slurm", "another universe"),
        ("cloud_label_x = y", "grid universe"),
        ("dagman_log = dag.nodes.log", "DAGMan"),
        ("log_xml = true", "not XML"),
        ("transfer_output = false", "stdout and stderr"),
        ("stream_input = true", "stream"),
        ("transfer_input = false", "input file with it"),
        ("when_to_transfer_output = ON_SUCCESS", "whatever its exit code"),
        ("preserve_relative_paths = true", "base names"),
    ],
)
def test_refused_commands_name_their_line_and_reason(tmp_path: Path, line: str, words: str) -> None:
    e = refused(tmp_path, line)
    assert e.line == 1 + len(line.split("\n")) and words in e.reason and "not supported by llic" in e.reason


def test_a_refused_command_set_to_nothing_is_not_set(tmp_path: Path) -> None:
    assert len(parse(tmp_path, "executable = /bin/echo\nx509userproxy =\nqueue\n").tasks(1)) == 1


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("max_retries = x", "max_retries=x is invalid, must eval to an integer."),
        ("priority = x", "priority=x is invalid, must eval to an integer."),
        ("hold = maybe", "hold=maybe is invalid, must eval to a boolean."),
        ("hold = yes", "hold=yes is invalid, must eval to a boolean."),  # yes is no boolean to condor
        ("skip_filechecks = warn", "skip_filechecks=warn is invalid, must eval to a boolean."),
        ("stream_output = maybe", "stream_output=maybe is invalid, must eval to a boolean."),
        ("notification = bogus", "Notification must be 'Never', 'Always', 'Complete', or 'Error'"),
        ("periodic_remove = (((", "Parse error in expression"),
        ("requirements = Memory >", "Parse error in expression"),
        ("on_exit_remove = ExitCode ==", "Parse error in expression"),
    ],
)
def test_values_condor_refuses(tmp_path: Path, line: str, words: str) -> None:
    e = refused(tmp_path, line)
    assert e.line == 2 and words in e.reason


@pytest.mark.parametrize(
    ("name", "shown"),
    [("periodic_hold", "periodic_hold"), ("requirements", "requirements"), ("+LlicX", "MY.LlicX")],
)
def test_an_expression_too_long_for_the_master_is_refused(tmp_path: Path, name: str, shown: str) -> None:
    """`1+1+...` of 500,000 terms passed the check, then crashed the master's classad parser."""
    e = refused(tmp_path, f"{name} = {'1+' * 500_000}1")
    assert e.line == 2
    assert e.reason == f"{shown}: an expression of 1000001 characters, more than the 65536 allowed"
    long_but_real = "(" + " || ".join(f'Machine == "node{i}.example.org"' for i in range(1750)) + ")"
    assert 60_000 < len(long_but_real) < 65_536
    assert len(parse(tmp_path, f"executable = /bin/echo\n{name} = {long_but_real}\nqueue\n").tasks(1)) == 1
    per_job = f"executable = /bin/echo\n{name} = $(Item)\nqueue Item in (1, {'1+' * 40_000}1)\n"
    with pytest.raises(SubmitFileError, match=f"^job.sub:2: {re.escape(shown)}: an expression of 80001"):
        parse(tmp_path, per_job).tasks(1)


def test_a_refused_value_is_shown_cut_short(tmp_path: Path) -> None:
    """A 20 KB expression that did not parse made a 20 KB error line."""
    e = refused(tmp_path, f"requirements = ({'x' * 20_000}")
    assert e.reason == f"requirements=({'x' * 199}...: Parse error in expression"
    for line in (f"environment = {'y' * 20_000}", f"queue {'q' * 20_000}"):  # any error, cut
        e = refused(tmp_path, line)
        assert len(e.reason) < 1100 and e.reason.endswith("characters)")


def test_a_value_that_varies_is_checked_for_each_job(tmp_path: Path) -> None:
    with pytest.raises(SubmitFileError, match=r"job.sub:2: max_retries=x is invalid"):
        parse(tmp_path, "executable = /bin/echo\nmax_retries = $(Item)\nqueue in (1, 2, x)\n").tasks(1)
    with pytest.raises(SubmitFileError, match=r"job.sub:2: .*must eval to a boolean"):
        parse(tmp_path, "executable = /bin/echo\nqueue hold in (true, maybe)\n").tasks(1)


def test_the_quick_expression_check_never_accepts_what_classad2_refuses() -> None:
    """classad_syntax.py is a fast path: whatever it accepts, HTCondor's parser accepts too."""
    rng = random.Random(20)
    accepted = 0
    for alphabet in ('ab1 ()"+-*/=!<>&|?:.,[]{};x', "aE9.0 +-e()", "ab'\" .\\()", "isnt x1 ?:()", "12.e+-x "):
        for _ in range(4000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
            if is_simple_expression(text):
                accepted += 1
                classad2.ExprTree(text)  # raises if HTCondor disagrees
    assert accepted > 1000
    for text in ('(OpSys == "LINUX") && (Memory >= 1024)', "a ? b : c", "[a = 1; b = 2].a", "x is undefined"):
        assert is_simple_expression(text)


def test_ignored_commands_are_named_with_their_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llic.cli import master_submitter
    from llic.submit.commands import ignored_commands

    text = "executable = /bin/echo\nnotification = never\nbatch_name = run1\nqueue\n"
    sub = parse(tmp_path, text)
    assert ignored_commands(sub.blocks[0]) == [
        "job.sub:2: notification is ignored: llic sends no e-mail",
        "job.sub:3: batch_name is ignored: labels and bookkeeping of the HTCondor queue; "
        "llic's tasks are not in it",
    ]
    monkeypatch.chdir(tmp_path)
    assert master_submitter(["--dry-run", "job.sub"]) == 0
    err = capsys.readouterr().err
    assert "master_submitter: note: job.sub:2: notification is ignored: llic sends no e-mail" in err
