/**
 * The dashboard's only script: progressive touches on server-rendered pages (everything works without it).
 * - `[data-copy]` buttons copy the text of the element whose id they name.
 * - forms with `data-confirm` ask before they submit.
 * - `[data-autosubmit]` selects submit their form when changed.
 */

function copyFrom(button: HTMLElement): void {
  const target = document.getElementById(button.dataset.copy ?? '');
  if (!target) return;
  const text = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement ? target.value : (target.textContent ?? '');
  // The button says what happened for a moment; its accessible name follows its text (axe: label-content-name-mismatch).
  const done = (label: string) => {
    const text = button.dataset.text ?? button.textContent ?? 'Copy';
    const name = button.dataset.name ?? button.getAttribute('aria-label');
    button.dataset.text = text;
    if (name !== null) button.dataset.name = name;
    button.textContent = label;
    if (name !== null) button.setAttribute('aria-label', label);
    setTimeout(() => {
      button.textContent = text;
      if (name !== null) button.setAttribute('aria-label', name);
    }, 1500);
  };
  // No clipboard (a page over plain http at a host name is not a secure context: navigator.clipboard is missing) or
  // no permission: the text is selected so the user can copy it.
  const select = () => {
    if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement) {
      target.select();
      return done('Selected');
    }
    const range = document.createRange();
    range.selectNodeContents(target);
    const selection = window.getSelection();
    selection?.removeAllRanges();
    selection?.addRange(range);
    done('Selected');
  };
  if (!(navigator.clipboard as Clipboard | undefined)) return select();
  navigator.clipboard.writeText(text).then(() => done('Copied'), select);
}

document.addEventListener('click', (event) => {
  const button = (event.target as Element | null)?.closest<HTMLElement>('[data-copy]');
  if (button) {
    event.preventDefault();
    copyFrom(button);
  }
});

document.addEventListener('submit', (event) => {
  const form = event.target as HTMLFormElement;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

document.addEventListener('change', (event) => {
  const field = event.target as HTMLElement;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined) field.form?.requestSubmit();
});
