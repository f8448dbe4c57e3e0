"""Store rules that changed between RocketMQ versions, worded with the versions they hold for (found in RocketMQ's
own history), so that a message never claims one version's behaviour for all.

MappedFileQueue.load on a file whose size is not the mapped file size (commitlog, consume queue, timerlog):
  4.4.0 and older, 4.9.2  "ignore it": the load stops there, the broker starts without that file and every later one
  4.5.1-4.9.1, 4.9.3+     "please check it manually": the load fails, the broker does not start (1276539ea7, 7b05208618)
  5.1.3+                  a zero-length LAST file is deleted first (4e09a9cfe9, ISSUE #6904)
"""
SIZE_MISMATCH = ("the broker refuses to start (RocketMQ 4.5.1 and later; 4.4 and older and 4.9.2 instead start "
                 "without this file and every later one)")
ZERO_LAST = ("RocketMQ 5.1.3 and later delete it at start; 4.5.1 to 5.1.2 refuse to start (4.4 and older and 4.9.2 "
             "start without it)")
