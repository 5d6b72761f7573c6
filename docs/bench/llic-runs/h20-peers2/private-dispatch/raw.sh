i=0; while [ $i -lt 500 ]; do /bin/sh /tmp/llic-bench-common/blast.sh q db out.$1; i=$((i+1)); done
