#!/bin/bash
# Every 60 s while tlpd runs: resident bytes of the node state slots file, page cache totals,
# and tlpd's read/write bytes from /proc/PID/io.
work=$1 out=$2
echo "seconds,slots_bytes,slots_resident,cached_kib,dirty_kib,free_kib,tlpd_read_bytes,tlpd_write_bytes,applied" > "$out"
begin=$(date +%s)
while true; do
  pid=$(pgrep -x tlpd | head -1)
  slots=$work/data/node_states/slots
  if [[ -n $pid && -f $slots ]]; then
    read -r res size < <(fincore --bytes --noheadings --output RES,SIZE "$slots" 2>/dev/null)
    cached=$(awk '/^Cached:/{print $2}' /proc/meminfo); dirty=$(awk '/^Dirty:/{print $2}' /proc/meminfo); free=$(awk '/^MemFree:/{print $2}' /proc/meminfo)
    rb=$(awk '/^read_bytes/{print $2}' /proc/$pid/io 2>/dev/null); wb=$(awk '/^write_bytes/{print $2}' /proc/$pid/io 2>/dev/null)
    echo "$(( $(date +%s) - begin )),$size,$res,$cached,$dirty,$free,$rb,$wb" >> "$out"
  fi
  sleep 60
done
