#!/bin/sh
# say_exit.sh COMMAND [ARGS...]: runs COMMAND and ends its output with "[command exited STATUS]". A ctest with a
# PASS_REGULAR_EXPRESSION (one rank's success line, say) is judged by its output alone: ctest then ignores the exit
# status, so a launcher's failure for another rank went unseen. Through this, FAIL_REGULAR_EXPRESSION
# "command exited [1-9]" (${NNS_FAILED_EXIT} in the tests' CMake files) fails such a test on the status too.
"$@"
status=$?
echo "[command exited $status]"
exit "$status"
