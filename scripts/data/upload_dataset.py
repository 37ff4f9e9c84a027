"""Upload a JSONL data set into the `data` table, all lines or none.

python scripts/data/upload_dataset.py --file_path x.jsonl --dataset_name X [--replace | --append]
"""

from utu.commands.upload import main

if __name__ == "__main__":
    main()
