"""The market (Vast.ai): probe verdicts, selection, race, quarantine, guardian."""
