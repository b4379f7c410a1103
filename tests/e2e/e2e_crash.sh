echo "not yet"; exit 1
