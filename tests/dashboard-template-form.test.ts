import { describe, expect, it } from 'vitest';
import { bodyFromFields, duplicateVariable, fieldErrorOf, fieldsFromForm, lineOf, sampleValues } from '../dashboard/template-form.js';

/** The template editor's form as data: where a refusal belongs, the body the form makes, the sample values. */

describe('fieldErrorOf', () => {
  it.each([
    // The language module's words (decisions section 9): the part, then line and column.
    ['invalid_template', 'html: line 3, column 14: unexpected token', { field: 'html', line: 3, column: 14 }],
    ['invalid_template', 'text: line 2: the variable x is used but not declared', { field: 'text', line: 2, column: null }],
    ['invalid_template', 'subject: line 1, column 1: tag not closed', { field: 'subject', line: 1, column: 1 }],
    // liquidjs's own words, at the end.
    ['invalid_template', 'html: tag "endif" not found, line:3, col:4', { field: 'html', line: 3, column: 4 }],
    // The API's request rules name the field, nested or not.
    ['invalid_request', 'subject: is required', { field: 'subject', line: null, column: null }],
    ['invalid_request', 'variables.x.kind: must be text or url', { field: 'variables', line: null, column: null }],
    ['invalid_request', 'layout: no layout named brand on this account', { field: 'layout', line: null, column: null }],
    // A taken name names no field in its message, but belongs to the name.
    ['template_exists', 'A template named hi already exists on this account.', { field: 'name', line: null, column: null }],
    // Anything else goes above the form.
    ['template_limit', 'This account already has 100 templates (layouts included); delete one first.', { field: null, line: null, column: null }],
    ['invalid_template', 'The source (subject, html and text) must be at most 256 KB', { field: null, line: null, column: null }],
  ] as const)('%s %s', (code, message, placed) => {
    expect(fieldErrorOf({ code, message })).toEqual({ ...placed, code, message });
  });
});

describe('the form', () => {
  it('reads the variable rows, skipping blank ones, and makes the API body without empty parts', () => {
    const fields = fieldsFromForm({
      name: ' hi ',
      kind: 'template',
      subject: 'Hi {{ who }}',
      html: '<p>a</p>\r\n<p>b</p>',
      text: '',
      layout: '',
      'var.0.name': 'who',
      'var.0.required': 'on',
      'var.0.kind': 'text',
      'var.1.name': '',
      'var.2.name': 'link',
      'var.2.kind': 'url',
    });
    expect(fields.variables).toEqual([
      { name: 'who', required: true, kind: 'text' },
      { name: 'link', required: false, kind: 'url' },
    ]);
    expect(bodyFromFields(fields, true)).toEqual({
      name: 'hi',
      kind: 'template',
      subject: 'Hi {{ who }}',
      html: '<p>a</p>\n<p>b</p>',
      variables: { who: { required: true, kind: 'text' }, link: { required: false, kind: 'url' } },
    });
    expect(bodyFromFields(fields, false)).not.toHaveProperty('name');
    expect(duplicateVariable(fields)).toBeNull();
    expect(duplicateVariable({ ...fields, variables: [...fields.variables, { name: 'who', required: false, kind: 'text' }] })).toBe('who');
  });

  it('fills a sample value per variable: a text one its name in brackets, a URL one https://example.com/', () => {
    expect(sampleValues({ firstName: { kind: 'text' }, link: { kind: 'url' } })).toEqual({ firstName: '[firstName]', link: 'https://example.com/' });
    expect(sampleValues([{ name: 'a', required: false, kind: 'text' }])).toEqual({ a: '[a]' });
  });

  it('finds the text of a line', () => {
    expect(lineOf('one\ntwo\nthree', 2)).toBe('two');
    expect(lineOf('one', 2)).toBeNull();
    expect(lineOf('one', 0)).toBeNull();
  });
});
