#!/bin/sh
# prints submit commands: include : bin/settings.sh NAME |
echo "arguments = \"generated $1 \$(Process)\""
echo "output = gen-$1.\$(Process).out"
