"""The llic agent: runs a master's tasks one after another on an execute machine (seed §3.9).

Started by HTCondor as `python3 agent.pyz HOST PORT AGENT_ID INPUT_FILE` (the zipapp from
`llic.agent_build`); needs nothing but a Python 3.9+ (stdlib, plus the bundled pure-Python msgpack).

A communicator (the main thread) talks to the master and prepares tasks, a launcher thread runs them:
communication and execution overlap, and the executable and common input files are kept for every
task instead of being transferred each time. See `llic.agent.inputfile` for the input file and
`llic.agent.__main__` for exit codes.
"""
