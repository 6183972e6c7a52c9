"""The receipt report (`appliance gate report RECEIPT... --html FILE`): receipts drawn as one self-contained page."""
