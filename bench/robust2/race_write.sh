#!/bin/bash
# Concurrent `editapply apply --write` runs on one file (issue 31, item 3; bench/HISTORY.md,
# "Robustness, second round"): WRITERS writers, each editing its own function, ROUNDS rounds.
# Prints each writer's exit code / whether its edit is in the file, and the edits lost.
#   bench/robust2/race_write.sh TREE WRITERS ROUNDS
tree=$1; writers=$2; rounds=$3; py=${PYTHON:-python3}
dir=$(mktemp -d); names=(a b c)
lost=0
for t in $(seq "$rounds"); do
  printf 'def a():\n    return 1\n\n\ndef b():\n    return 2\n\n\ndef c():\n    return 3\n' > "$dir/t.py"
  for f in a b c; do printf "# ... existing code ...\ndef $f():\n    return \"new_$f\"\n# ... existing code ...\n" > "$dir/s$f.snip"; done
  for i in $(seq 0 $((writers - 1))); do
    (cd "$tree" && PYTHONPATH="$tree" $py -m engine.cli apply "$dir/t.py" "$dir/s${names[$i]}.snip" --no-model --write \
      >/dev/null 2>&1; echo $? > "$dir/rc$i") &
  done
  wait
  for i in $(seq 0 $((writers - 1))); do
    rc=$(cat "$dir/rc$i"); has=$(grep -c "new_${names[$i]}" "$dir/t.py")
    [ "$rc" = 0 ] && [ "$has" = 0 ] && lost=$((lost + 1))
    echo -n "$rc/$has "
  done
  echo
done
echo "edits lost: $lost"
rm -rf "$dir"
